// cutout dashboard: small enhancements only; every page works without it.
"use strict";

// Copy buttons: data-copy names the element whose text (or value) to copy.
// navigator.clipboard needs a secure context, which a LAN appliance on plain
// HTTP is not, so fall back to selecting the text and execCommand("copy").
document.querySelectorAll("[data-copy]").forEach((button) => {
  button.addEventListener("click", async () => {
    const source = document.getElementById(button.dataset.copy);
    const text = source.value !== undefined ? source.value : source.textContent;
    let copied = false;
    if (navigator.clipboard && window.isSecureContext) {
      try { await navigator.clipboard.writeText(text); copied = true; } catch (_) { copied = false; }
    }
    if (!copied) {
      const area = document.createElement("textarea");
      area.value = text;
      area.setAttribute("readonly", "");
      area.style.position = "fixed";
      area.style.opacity = "0";
      document.body.appendChild(area);
      area.select();
      try { copied = document.execCommand("copy"); } catch (_) { copied = false; }
      area.remove();
    }
    const label = button.textContent;
    button.textContent = copied ? "Copied" : "Select and copy by hand";
    setTimeout(() => { button.textContent = label; }, 2000);
  });
});

// Try it: drag and drop onto the drop zone, and show the chosen file's name.
const zone = document.querySelector(".dropzone");
if (zone) {
  const input = zone.querySelector("input[type=file]");
  const name = zone.querySelector(".filename");
  const show = () => { name.textContent = input.files.length ? input.files[0].name : ""; };
  input.addEventListener("change", show);
  ["dragenter", "dragover"].forEach((type) => zone.addEventListener(type, (event) => {
    event.preventDefault();
    zone.classList.add("over");
  }));
  ["dragleave", "drop"].forEach((type) => zone.addEventListener(type, () => zone.classList.remove("over")));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    if (event.dataTransfer.files.length) {
      input.files = event.dataTransfer.files;
      show();
    }
  });
  const form = zone.closest("form");
  form.addEventListener("submit", () => {
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    button.textContent = "Removing the background…";
  });
}
