// remove.bg's published Node client (npm `remove.bg`, pinned in
// package-lock.json) against the appliance, unmodified but for the address
// it posts to: a cut-out from a file and from base64 comes back, its crop
// and background options work, and its own error handling sees the
// appliance's 400, 402 and 429 as remove.bg's.
// Starts the real binary on a free port with a fresh data directory.
//
// Usage: node tests/e2e/removebg-client.mjs [path/to/cutout]

import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";

const require = createRequire(import.meta.url);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const binary = process.argv[2] ?? path.join(root, "target/debug/cutout");
const photoPath = path.join(root, "../shared/eval/dev/grabcut/images/106024.jpg");
const dataDir = mkdtempSync(path.join(tmpdir(), "cutout-removebg-"));
const out = mkdtempSync(path.join(tmpdir(), "cutout-removebg-out-"));

function cli(...args) {
  return execFileSync(binary, ["--data-dir", dataDir, ...args],
    { env: { ...process.env, RUST_LOG: "warn" }, stdio: ["ignore", "pipe", "pipe"] }).toString();
}

function account(name) {
  cli("account", "create", name, "--plan", "pro");
  return cli("key", "create", name).trim().split("\n").pop();
}

const server = spawn(binary, ["--data-dir", dataDir, "--models-dir", path.join(root, "models"),
  "serve", "--listen", "127.0.0.1:0", "--model", "u2netp"], { env: { ...process.env, RUST_LOG: "info" } });
let log = "";
const base = await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error(`server did not start:\n${log}`)), 60_000);
  server.on("exit", (code) => reject(new Error(`server exited ${code}:\n${log}`)));
  server.stderr.on("data", (chunk) => {
    log += chunk;
    const listening = log.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
    if (listening) {
      clearTimeout(timer);
      resolve(listening[1]);
    }
  });
});

// The one change to the client: the address it posts to.
const unirest = require("unirest");
const post = unirest.post;
unirest.post = (url) => post(url.replace("https://api.remove.bg", base));
const removebg = require("remove.bg");

/** A call whose body is not all sent: it holds one of its account's slots. */
function hangingCall(key) {
  const socket = net.connect(Number(new URL(base).port), "127.0.0.1");
  socket.write(`POST /v1.0/removebg HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${key}\r\n`
    + "Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 100000\r\n\r\n--b\r\n");
  return socket;
}

try {
  for (let i = 0; i < 600; i++) {
    const reply = await fetch(`${base}/readyz`).catch(() => null);
    if (reply?.ok) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const booth = account("booth");

  const fromFile = await removebg.removeBackgroundFromImageFile({
    path: photoPath, apiKey: booth, size: "regular", type: "product",
    outputFile: path.join(out, "from-file.png"),
  });
  const png = readFileSync(path.join(out, "from-file.png"));
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], "a PNG");
  assert.equal(png[25], 6, "RGBA");
  assert.equal(fromFile.detectedType, "product");
  assert.equal(fromFile.creditsCharged, "1");
  assert.equal(fromFile.rateLimitRemaining, "499");
  assert.ok(Number(fromFile.resultWidth) * Number(fromFile.resultHeight) <= 250_000, "regular is a preview");

  const fromBase64 = await removebg.removeBackgroundFromImageBase64({
    base64img: readFileSync(photoPath).toString("base64"), apiKey: booth, size: "regular", type: "product",
  });
  assert.deepEqual(Buffer.from(fromBase64.base64img, "base64"), png, "the same cut-out");

  // The client's own option names: cropped with a margin, on a colour.
  const styled = await removebg.removeBackgroundFromImageFile({
    path: photoPath, apiKey: booth, size: "regular", crop: true, crop_margin: "10px", bg_color: "81d4fa",
    outputFile: path.join(out, "styled.png"),
  });
  const styledPng = readFileSync(path.join(out, "styled.png"));
  assert.equal(styledPng.readUInt32BE(16), Number(styled.resultWidth), "the PNG's width");
  assert.equal(styledPng.readUInt32BE(20), Number(styled.resultHeight), "the PNG's height");
  assert.equal(styledPng[25], 2, "RGB: the colour fills every transparent pixel");
  assert.ok(Number(styled.resultWidth) < Number(fromFile.resultWidth), "cropped");
  await assert.rejects(
    removebg.removeBackgroundFromImageFile({ path: photoPath, apiKey: booth, crop: true, crop_margin: "90%" }),
    (errors) => errors[0].code === "invalid_crop_margin",
  );

  const usedUp = account("used-up");
  cli("usage", "set", "used-up", "--count", "500");
  await assert.rejects(
    removebg.removeBackgroundFromImageFile({ path: photoPath, apiKey: usedUp }),
    (errors) => errors[0].code === "quota_exceeded" && /500 images/.test(errors[0].detail),
  );

  const busy = account("busy");
  const held = Array.from({ length: 5 }, () => hangingCall(busy));
  // Each, once admitted, holds its declared 100,000 bytes of upload room.
  for (let i = 0; ; i++) {
    const metrics = await (await fetch(`${base}/metrics`)).text();
    if (/^cutout_uploads_held_bytes 500000$/m.test(metrics)) break;
    assert.ok(i < 600, "the five hanging calls never held their slots");
    await new Promise((r) => setTimeout(r, 100));
  }
  await assert.rejects(
    removebg.removeBackgroundFromImageFile({ path: photoPath, apiKey: busy }),
    (errors) => errors[0].code === "too_many_concurrent_requests",
  );
  held.forEach((socket) => socket.destroy());
  const month = new Date().toISOString().slice(0, 7);
  assert.equal(cli("usage", "busy").trim(), `busy ${month}: 0 of 500`, "the 429 cost nothing");
  console.log("remove.bg's Node client: file, base64, its options, 400, 402 and 429 as remove.bg answers them");
} catch (error) {
  console.error(log);
  throw error;
} finally {
  server.kill();
  rmSync(dataDir, { recursive: true, force: true });
  rmSync(out, { recursive: true, force: true });
}
