// The admin pages' one script, served as a file: the pages' Content-Security-Policy allows
// no inline script, and no page builds script from data.
// A form that asks before it acts names its question in data-confirm (an attribute, which
// the template escapes as text): <form data-confirm="Delete …?">.
"use strict";
document.addEventListener("submit", (event) => {
  const form = event.target;
  const question = form instanceof HTMLFormElement ? form.dataset.confirm : undefined;
  if (question !== undefined && !window.confirm(question)) {
    event.preventDefault();
  }
});

// Live figures: an element with data-live="URL" follows that Server-Sent Events stream; each
// "figures" event sets the text of the elements inside it named by data-figure (text only,
// never markup). The browser's EventSource reconnects by itself.
document.addEventListener("DOMContentLoaded", () => {
  for (const area of document.querySelectorAll("[data-live]")) {
    const state = area.querySelector("[data-live-state]");
    const source = new EventSource(area.dataset.live);
    source.addEventListener("figures", (event) => {
      const figures = JSON.parse(event.data);
      for (const element of document.querySelectorAll("[data-figure]")) {
        const name = element.dataset.figure;
        if (Object.prototype.hasOwnProperty.call(figures, name)) {
          element.textContent = String(figures[name]);
        }
      }
      if (state) { state.textContent = "live"; }
    });
    source.addEventListener("error", () => { if (state) { state.textContent = "reconnecting"; } });
  }
});
