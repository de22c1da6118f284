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

// Live figures: an element with data-live="URL" follows that Server-Sent Events stream. Each
// "figures" event is {"figures": {name: text}, "charts": {name: {label, bars: [[title, y,
// height], …]}}}: the text of each element inside the area named by data-figure is set (text
// only, never markup; data-bad-if / data-bad-unless name the value that marks it bad), and the
// bars of each svg[data-chart] are redrawn. The browser's EventSource reconnects by itself.
function applyFigures(area, figures) {
  for (const element of area.querySelectorAll("[data-figure]")) {
    const name = element.dataset.figure;
    if (!Object.prototype.hasOwnProperty.call(figures, name)) { continue; }
    const text = String(figures[name]);
    element.textContent = text;
    if (element.dataset.badIf !== undefined) { element.classList.toggle("bad", text === element.dataset.badIf); }
    if (element.dataset.badUnless !== undefined) { element.classList.toggle("bad", text !== element.dataset.badUnless); }
  }
}

function applyCharts(area, charts) {
  for (const svg of area.querySelectorAll("svg[data-chart]")) {
    const chart = charts[svg.dataset.chart];
    if (chart === undefined) { continue; }
    svg.setAttribute("aria-label", String(chart.label));
    const rects = svg.querySelectorAll("rect");
    chart.bars.forEach(([title, y, height], i) => {
      if (i >= rects.length) { return; }
      rects[i].setAttribute("y", String(Number(y)));
      rects[i].setAttribute("height", String(Number(height)));
      rects[i].querySelector("title").textContent = String(title);
    });
  }
}

document.addEventListener("DOMContentLoaded", () => {
  for (const area of document.querySelectorAll("[data-live]")) {
    const state = area.querySelector("[data-live-state]");
    const source = new EventSource(area.dataset.live);
    source.addEventListener("open", () => { if (state) { state.textContent = "live"; } });
    source.addEventListener("figures", (event) => {
      const update = JSON.parse(event.data);
      applyFigures(area, update.figures || {});
      applyCharts(area, update.charts || {});
      if (state) { state.textContent = "live"; }
    });
    source.addEventListener("error", () => {
      if (state) {  // (a refusal, such as every live slot in use, ends the stream for good)
        state.textContent = source.readyState === EventSource.CLOSED ? "not live: reload later" : "reconnecting";
      }
    });
  }
});

// Phones: each table row is shown as a card of "header: value" lines (admin.css), so no column
// hides behind a horizontal scroll; the labels are the table's own headers, set here once.
document.addEventListener("DOMContentLoaded", () => {
  for (const table of document.querySelectorAll(".table-scroll table")) {
    const headers = Array.from(table.querySelectorAll("thead th"), (th) => th.textContent.trim());
    for (const row of table.querySelectorAll("tbody tr")) {
      Array.from(row.children).forEach((cell, index) => {
        if (!cell.hasAttribute("colspan") && headers[index] && cell.dataset.label === undefined) {
          cell.dataset.label = headers[index];
        }
      });
    }
    table.classList.add("cards");
  }
});
