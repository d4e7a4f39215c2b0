// The console's only script: confirmations, live sections, "select all". No build, no CDN.
"use strict";

document.addEventListener("submit", (event) => {
  const form = event.target;
  const question = form.getAttribute("data-confirm");
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});

// A section with data-live="N" is fetched again from the same page every N seconds.
for (const section of document.querySelectorAll("[data-live][id]")) {
  const seconds = Math.max(2, Number(section.getAttribute("data-live")) || 5);
  setInterval(async () => {
    try {
      const response = await fetch(window.location.href, { credentials: "same-origin" });
      if (!response.ok) return;
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.getElementById(section.id);
      if (fresh) section.innerHTML = fresh.innerHTML;
    } catch (error) {
      // the broker may be restarting: keep what is shown, try again next time
    }
  }, seconds * 1000);
}

for (const box of document.querySelectorAll("input[data-select-all]")) {
  box.addEventListener("change", () => {
    const name = box.getAttribute("data-select-all");
    for (const other of document.querySelectorAll(`input[name="${name}"]`)) {
      other.checked = box.checked;
    }
  });
}
