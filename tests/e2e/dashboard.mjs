// The dashboard end to end, as the operator and a booth owner use it, in
// headless Chromium. Starts the real binary on a free port with a fresh
// data directory and the smallest real model, then walks the whole story:
// setup link -> admin -> account + user -> key -> API call -> usage ->
// Try it -> docs -> revoke -> 401; then the same appliance with HTTPS on,
// where the browser is sent from plain HTTP to HTTPS and signs in there, and
// a booth asks to pair and the operator approves it on the Booths page. A
// screenshot of every page goes to $E2E_ARTIFACTS (default
// target/e2e-artifacts).
//
// Usage: node tests/e2e/dashboard.mjs [path/to/cutout]

import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import https from "node:https";
import { mkdtempSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const binary = process.argv[2] ?? path.join(root, "target/debug/cutout");
const artifacts = process.env.E2E_ARTIFACTS ?? path.join(root, "target/e2e-artifacts");
const photoPath = path.join(root, "../shared/eval/dev/grabcut/images/106024.jpg");
const photo = readFileSync(photoPath);
const adminPassword = "operator's long password";
const userPassword = "booth owner's password";

mkdirSync(artifacts, { recursive: true });
const dataDir = mkdtempSync(path.join(tmpdir(), "cutout-e2e-"));

/**
 * Starts `cutout serve` with `env` added and resolves with its plain-HTTP
 * address, the setup link (on a first start) and HTTPS's address and
 * fingerprint (when `CUTOUT_TLS_LISTEN` is set).
 */
function startServer(env = {}) {
  const server = spawn(binary, ["--data-dir", dataDir, "--models-dir", path.join(root, "models"),
    "serve", "--listen", "127.0.0.1:0", "--model", "u2netp"], { env: { ...process.env, RUST_LOG: "info", CUTOUT_PIPELINE_BENCH_WHEN_IDLE: "false", ...env } });
  let log = "";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${log}`)), 60_000);
    server.on("exit", (code) => reject(new Error(`server exited ${code}:\n${log}`)));
    server.stderr.on("data", (chunk) => {
      log += chunk;
      const setup = log.match(/(http:\/\/127\.0\.0\.1:\d+\/setup\?token=[0-9a-f]{64})/);
      const listening = log.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      const https = log.match(/HTTPS on (127\.0\.0\.1:\d+); certificate SHA-256 fingerprint ([0-9A-F:]{95})/);
      if (listening && (setup || env.CUTOUT_TLS_LISTEN) && (https || !env.CUTOUT_TLS_LISTEN)) {
        clearTimeout(timer);
        resolve({
          server, base: listening[1], setupLink: setup?.[1], log: () => log,
          httpsBase: https && `https://${https[1]}`, fingerprint: https?.[2],
        });
      }
    });
  });
}

/**
 * A booth's request over HTTPS, trusting no certificate yet: the answer's
 * status and JSON, and the SHA-256 of the certificate it saw.
 */
function booth(url, body) {
  return new Promise((resolve, reject) => {
    const request = https.request(url, {
      method: body ? "POST" : "GET", rejectUnauthorized: false, agent: false,
      headers: body ? { "Content-Type": "application/json" } : {},
    }, (reply) => {
      const certificate = createHash("sha256").update(reply.socket.getPeerCertificate().raw).digest();
      let text = "";
      reply.on("data", (chunk) => { text += chunk; });
      reply.on("end", () => resolve({ status: reply.statusCode, json: JSON.parse(text), certificate }));
    });
    request.on("error", reject);
    request.end(body && JSON.stringify(body));
  });
}

/** The code a booth shows: from the certificate it saw, its nonce and name. */
function pairingCode(certificate, nonce, name) {
  const digest = createHash("sha256").update("cutout-pair\0").update(certificate).update("\0")
    .update(nonce).update("\0").update(name).digest();
  const n = digest.readUInt32BE(0) % 1_000_000;
  return `${String(Math.floor(n / 1000)).padStart(3, "0")} ${String(n % 1000).padStart(3, "0")}`;
}

async function waitUntilReady(base) {
  for (let i = 0; i < 600; i++) {
    const reply = await fetch(`${base}/readyz`).catch(() => null);
    if (reply?.ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("the model never became ready");
}

async function callApi(base, key) {
  const form = new FormData();
  form.append("image_file", new Blob([photo], { type: "image/jpeg" }), "photo.jpg");
  form.append("size", "preview");
  return fetch(`${base}/api/remove-bg`, { method: "POST", headers: { "X-Api-Key": key }, body: form });
}

const { server, base, setupLink, log } = await startServer();
let browser;
let step = 0;
const problems = [];
try {
  await waitUntilReady(base);
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
  });
  const context = await browser.newContext({ viewport: { width: 1100, height: 800 }, acceptDownloads: true });
  const page = await context.newPage();
  // A CSP violation, a failed asset or a script error shows up here. A
  // page answered 4xx on purpose (a form error) is not a problem; Chromium
  // logs every such answer as "Failed to load resource", so failed loads
  // are judged from the responses instead.
  page.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) problems.push(`console: ${m.text()}`);
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("response", (r) => {
    const isPage = r.request().resourceType() === "document";
    if (r.status() >= 500 || (!isPage && r.status() >= 400)) problems.push(`${r.status()} for ${r.url()}`);
  });

  const shot = async (name, p = page) => {
    step += 1;
    await p.screenshot({ path: path.join(artifacts, `${String(step).padStart(2, "0")}-${name}.png`), fullPage: true });
  };
  const text = async () => page.locator("main").innerText();

  // The operator opens the one-time setup link from the log.
  await page.goto(setupLink);
  await shot("setup");
  // A file that is not a backup, offered to restore, is refused on the page.
  await page.setInputFiles("#backup_file", {
    name: "photo.jpg", mimeType: "image/jpeg", buffer: Buffer.from("not a backup"),
  });
  await page.fill("#passphrase", "a long enough passphrase");
  await page.click("form[action='/setup/restore'] button[type=submit]");
  assert.match(await page.locator("#restore-error").innerText(), /This file is not a cutout backup/);
  await shot("setup-restore-refused");
  await page.fill("#password", "long enough 1");
  await page.fill("#confirm", "long enough 2");
  await page.click("form[action='/setup'] button[type=submit]");
  assert.match(await page.locator(".field-error").innerText(), /The two passwords differ/);
  await shot("setup-passwords-differ");
  await page.fill("#password", adminPassword);
  await page.fill("#confirm", adminPassword);
  await page.click("form[action='/setup'] button[type=submit]");
  await page.waitForURL(`${base}/admin`);
  assert.match(await text(), /No accounts yet/);
  await shot("admin-no-accounts");

  // ... creates an account with a password for its user.
  await page.fill("#name", "photo-booth");
  await page.selectOption("#plan", "pro");
  await page.fill("#password", userPassword);
  await page.click("form[action='/admin/accounts'] button[type=submit]");
  await page.waitForURL(`${base}/admin/accounts/photo-booth?done=created`);
  assert.match(await text(), /Account created/);
  assert.match(await text(), /0 of 500/);
  await shot("admin-account-created");
  await page.click("text=Sign out");
  await page.waitForURL(/\/login/);
  assert.match(await text(), /You are signed out/);

  // A wrong password is said so, next to the form.
  await page.fill("#name", "photo-booth");
  await page.fill("#password", "not the password");
  await page.click("button[type=submit]");
  assert.match(await page.locator(".field-error").innerText(), /Wrong name or password/);
  await shot("login-wrong-password");

  // The booth owner signs in and makes a key.
  await page.fill("#name", "photo-booth");
  await page.fill("#password", userPassword);
  await page.click("button[type=submit]");
  await page.waitForURL(`${base}/account`);
  assert.match(await text(), /You have no active API keys/);
  await shot("account-no-keys");
  await page.fill("#label", "Booth 1 <front door>");
  await page.click("form[action='/account/keys'] button[type=submit]");
  const key = await page.inputValue("#new-key");
  assert.match(key, /^ck_[0-9a-f]{40}$/);
  assert.match(await text(), /Booth 1 <front door>/, "the label is shown as text, escaped");
  await page.click("button[data-copy=new-key]");
  await page.waitForFunction(() => document.querySelector("button[data-copy=new-key]").textContent === "Copied");
  await shot("account-new-key");

  // The key works against the API, and the account page counts it.
  const reply = await callApi(base, key);
  assert.equal(reply.status, 200);
  assert.equal(reply.headers.get("content-type"), "image/png");
  assert.equal(reply.headers.get("x-ratelimit-remaining"), "499");
  await page.goto(`${base}/account`);
  assert.match(await text(), /1 of 500/);
  assert.ok(!(await page.content()).includes(key), "the key is never shown again");
  await shot("account-usage-1");

  // Try it: drop a photo on the drop zone, send it, see the result.
  await page.click("text=Try it");
  await page.waitForURL(`${base}/try`);
  const dropped = await page.evaluateHandle((bytes) => {
    const transfer = new DataTransfer();
    transfer.items.add(new File([new Uint8Array(bytes)], "dropped.jpg", { type: "image/jpeg" }));
    return transfer;
  }, [...photo]);
  await page.dispatchEvent(".dropzone", "drop", { dataTransfer: dropped });
  assert.equal(await page.locator(".dropzone .filename").innerText(), "dropped.jpg");
  await shot("try-dropped");
  await page.click("#try-form button[type=submit]");
  await page.waitForSelector("#cutout");
  const size = await page.locator("#cutout").evaluate(async (img) => {
    await img.decode();
    return [img.naturalWidth, img.naturalHeight];
  });
  assert.ok(size[0] > 0 && size[1] > 0, `the cut-out loads: ${size}`);
  assert.match(await text(), /498 left this month/);
  await shot("try-result");
  const [download] = await Promise.all([page.waitForEvent("download"), page.click("text=Download cutout.png")]);
  assert.equal(download.suggestedFilename(), "cutout.png");
  const saved = path.join(artifacts, "try-download.png");
  await download.saveAs(saved);
  assert.deepEqual([...readFileSync(saved).subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

  // The same photo on white, cropped to the subject, as a JPEG.
  await page.setInputFiles("#image_file", { name: "photo.jpg", mimeType: "image/jpeg", buffer: photo });
  await page.fill("#bg_color", "white");
  await page.check("#crop");
  await page.selectOption("#format", "jpg");
  await shot("try-options");
  await page.click("#try-form button[type=submit]");
  await page.waitForSelector("text=Download cutout.jpg");
  const cropped = await page.locator("#cutout").evaluate(async (img) => {
    await img.decode();
    return [img.naturalWidth, img.naturalHeight];
  });
  assert.ok(cropped[0] * cropped[1] < size[0] * size[1], `cropped: ${cropped} of ${size}`);
  const [jpeg] = await Promise.all([page.waitForEvent("download"), page.click("text=Download cutout.jpg")]);
  const savedJpeg = path.join(artifacts, "try-download.jpg");
  await jpeg.saveAs(savedJpeg);
  assert.deepEqual([...readFileSync(savedJpeg).subarray(0, 3)], [0xff, 0xd8, 0xff]);
  assert.match(await text(), /497 left this month/);

  // A bad file is explained next to the form, and costs nothing.
  await page.setInputFiles("#image_file", { name: "notes.txt", mimeType: "image/jpeg", buffer: Buffer.from("not a photo") });
  await page.click("#try-form button[type=submit]");
  assert.match(await page.locator(".field-error").innerText(), /must be a JPEG, PNG or WEBP/);
  await shot("try-bad-file");

  // The docs carry the user's key prefix.
  await page.click("text=API docs");
  assert.ok((await text()).includes(`${key.slice(0, 12)}…`));
  assert.match(await text(), /too_many_concurrent_requests/);
  await page.click("button[data-copy=example-curl]");
  await shot("docs");

  // Revoke the key, with confirmation; the API refuses it from then on.
  await page.goto(`${base}/account`);
  assert.match(await text(), /3 of 500/);
  await page.click("text=Revoke");
  assert.match(await text(), /This cannot be undone/);
  await shot("revoke-confirm");
  await page.click("button:has-text('Revoke key')");
  await page.waitForURL(`${base}/account?done=revoked`);
  assert.match(await text(), /Key revoked/);
  await shot("account-key-revoked");
  const refused = await callApi(base, key);
  assert.equal(refused.status, 401);
  assert.equal((await refused.json()).errors[0].code, "invalid_api_key");

  // On a phone.
  const phone = await browser.newPage({ viewport: { width: 390, height: 844 }, isMobile: true });
  await phone.context().addCookies(await context.cookies());
  await phone.goto(`${base}/account`);
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth > window.innerWidth);
  assert.ok(!overflow, "no sideways scrolling on a phone");
  await shot("phone-account", phone);
  await phone.goto(`${base}/try`);
  await shot("phone-try", phone);
  await phone.close();

  // The operator sees the usage and the status.
  await page.click("text=Sign out");
  await page.fill("#name", "admin");
  await page.fill("#password", adminPassword);
  await page.click("button[type=submit]");
  await page.waitForURL(`${base}/admin`);
  assert.match(await page.locator("tbody tr").first().innerText(), /photo-booth\s+Pro\s+3\s+500/);
  await shot("admin-accounts");
  await page.click("text=Status");
  assert.match(await text(), /u2netp/);
  // No engine is set: the board's defaults chose one, and the page says why.
  assert.match(await text(), /tract-onnx|onnxruntime/);
  assert.match(await text(), /MiB; so by default/);
  assert.match(await text(), /not run yet/);
  // U2NetP alone is its one rung; nothing is known of this CPU's speed yet.
  assert.match(await text(), /type=auto serves alone \(u2netp alone, mean MAE [\d.]+x the best peer's on the dev sets\): its time here not known yet; the budget is 4 s/);
  await shot("admin-status");

  // The same appliance with HTTPS on: plain HTTP sends the browser to
  // HTTPS, the sign-in happens there (a Secure cookie, which Chromium keeps
  // only over HTTPS), and the Status page shows the fingerprint to pin.
  const secure = await startServer({ CUTOUT_TLS_LISTEN: "127.0.0.1:0", CUTOUT_MDNS_ENABLED: "false" });
  try {
    const tlsContext = await browser.newContext({ viewport: { width: 1100, height: 800 }, ignoreHTTPSErrors: true });
    const tlsPage = await tlsContext.newPage();
    await tlsPage.goto(`${secure.base}/login`);
    assert.equal(tlsPage.url(), `${secure.httpsBase}/login`, "sent from plain HTTP to HTTPS");
    await tlsPage.fill("#name", "admin");
    await tlsPage.fill("#password", adminPassword);
    await tlsPage.click("button[type=submit]");
    await tlsPage.waitForURL(`${secure.httpsBase}/admin`);
    const session = (await tlsContext.cookies()).find((c) => c.name === "cutout_session");
    assert.ok(session?.secure && session.httpOnly, "the session cookie is Secure and HttpOnly");
    await tlsPage.click("text=Status");
    assert.match(await tlsPage.locator("main").innerText(), new RegExp(`port ${secure.httpsBase.split(":").pop()}`));
    assert.ok((await tlsPage.locator("main").innerText()).includes(secure.fingerprint), "the fingerprint to pin");
    await shot("https-admin-status", tlsPage);

    // A booth with no key asks to pair; the operator finds its code on the
    // Booths page, approves it into the account, and the booth collects
    // its own key, which cuts out a photo.
    const nonce = randomBytes(16).toString("hex");
    const asked = await booth(`${secure.httpsBase}/api/pair`, { name: "Booth by the door", nonce });
    assert.equal(asked.status, 202);
    const shown = pairingCode(asked.certificate, nonce, "Booth by the door");
    await tlsPage.click("text=Booths");
    const row = tlsPage.locator("tr[data-pairing]");
    assert.equal(await row.locator("td.code").innerText(), shown, "the dashboard shows the booth's code");
    await shot("admin-booths", tlsPage);
    await row.locator("select[name=account]").selectOption("photo-booth");
    await row.locator("button", { hasText: "Approve" }).click();
    await tlsPage.waitForURL(`${secure.httpsBase}/admin/booths?done=paired`);
    assert.match(await tlsPage.locator("main").innerText(), /Booth paired/);
    await shot("admin-booth-paired", tlsPage);
    const collected = await booth(`${secure.httpsBase}/api/pair/${asked.json.id}`);
    assert.equal(collected.status, 200);
    assert.equal(collected.json.account, "photo-booth");
    assert.equal((await callApi(secure.base, collected.json.api_key)).status, 200);

    // That call came over plain HTTP: the account's keys show it, and the
    // operator switches plain HTTP off for the API on the Status page.
    await tlsPage.goto(`${secure.httpsBase}/admin/accounts/photo-booth`);
    const lastInClear = tlsPage.locator("td[data-label='Last in clear']");
    assert.match(await lastInClear.last().innerText(), /^\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC$/);
    await tlsPage.click("text=Status");
    await tlsPage.locator("button", { hasText: "Switch off" }).click();
    await tlsPage.waitForURL(`${secure.httpsBase}/admin/status?done=plain-http-off`);
    assert.match(await tlsPage.locator("main").innerText(), /refused with 403 plain_http_off/);
    await shot("https-admin-status-plain-http-off", tlsPage);
    const refused = await callApi(secure.base, collected.json.api_key);
    assert.equal(refused.status, 403);
    assert.equal((await refused.json()).errors[0].code, "plain_http_off");
    await tlsPage.locator("button", { hasText: "Switch on" }).click();
    await tlsPage.waitForURL(`${secure.httpsBase}/admin/status?done=plain-http-on`);
    assert.equal((await callApi(secure.base, collected.json.api_key)).status, 200);
  } finally {
    secure.server.kill("SIGTERM");
  }

  assert.deepEqual(problems, [], "no console errors, CSP violations or server errors");
  console.log(`e2e: all steps passed; ${step} screenshots in ${artifacts}`);
} catch (error) {
  console.error(`e2e failed after step ${step}: ${error.stack}\n--- problems ---\n${problems.join("\n")}\n--- server log ---\n${log()}`);
  process.exitCode = 1;
} finally {
  await browser?.close();
  server.kill("SIGTERM");
  rmSync(dataDir, { recursive: true, force: true });
}
