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
// "figures" event is {"figures": {name: text}, "charts": {name: {label, top, first, last, bars:
// [[title, y, height], …]}}}: the text of each element inside the area named by data-figure is set (text
// only, never markup; data-bad-if / data-bad-unless name the value that marks it bad), and the
// bars of each svg[data-chart] are redrawn, and the marks of its axes ([data-axis]) set. The browser's EventSource reconnects by itself.
// Every stream a page follows is closed when the page is left (pagehide), also when the browser
// keeps the page for its back button: a browser allows six connections to a host, and streams of
// pages no longer shown would take them all. A page shown again from that cache is reloaded.
const streams = [];

function follow(url) {
  const source = new EventSource(url);
  streams.push(source);
  return source;
}

window.addEventListener("pagehide", () => { for (const source of streams) { source.close(); } });
window.addEventListener("pageshow", (event) => { if (event.persisted && streams.length) { window.location.reload(); } });

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
    const figure = svg.closest("figure");
    for (const mark of (figure ? figure.querySelectorAll("[data-axis]") : [])) {
      if (chart[mark.dataset.axis] !== undefined) { mark.textContent = String(chart[mark.dataset.axis]); }
    }
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
    const source = follow(area.dataset.live);
    source.addEventListener("open", () => { if (state) { state.textContent = "live"; } });
    source.addEventListener("figures", (event) => {
      const update = JSON.parse(event.data);
      applyFigures(area, update.figures || {});
      applyCharts(area, update.charts || {});
      if (state) { state.textContent = "live"; }
      // (the overview: its attention list changed, so it is fetched again as a live page's parts are)
      const listed = (update.figures || {}).attention;
      if (listed !== undefined && area.dataset.attention !== undefined && listed !== area.dataset.attention) {
        area.dataset.attention = String(listed);
        refreshParts(document.body, state).catch(() => { if (state) { state.textContent = "not updated: reload the page"; } });
      }
    });
    source.addEventListener("error", () => {
      if (state) {  // (a refusal, such as every live slot in use, ends the stream for good)
        state.textContent = source.readyState === EventSource.CLOSED ? "not live: reload later" : "reconnecting";
      }
    });
  }
});

// Phones: each table row is shown as a card of "header: value" lines (admin.css), so no column
// hides behind a horizontal scroll; the labels are the table's own headers, set here (at load,
// and again for the parts a live page puts in place).
function asCards(root) {
  for (const table of root.querySelectorAll(".table-scroll > table")) {  // (a table inside a cell stays a table)
    const headers = Array.from(table.querySelectorAll(":scope > thead > tr > th"), (th) => th.textContent.trim());
    for (const row of table.querySelectorAll(":scope > tbody > tr")) {
      Array.from(row.children).forEach((cell, index) => {
        if (!cell.hasAttribute("colspan") && headers[index] && cell.dataset.label === undefined) {
          cell.dataset.label = headers[index];
        }
      });
    }
    table.classList.add("cards");
  }
}

document.addEventListener("DOMContentLoaded", () => { asCards(document); });

// Live pages: an element with data-live-page="URL" follows that stream's "changed" events; at
// each, the page is fetched again (as the admin's browser would reload it) and each of its
// [data-live-part] elements is put in place of the one with the same id. The new parts come
// from the hub's own server-rendered page, parsed by DOMParser (which runs no script). Open
// <details> stay open; while the admin types in a field of a part, the update waits for the
// field to be left.
async function refreshParts(area, state) {
  const typing = document.activeElement;
  const parts = Array.from(area.querySelectorAll("[data-live-part][id]"));
  if (typing && typing.matches("input, textarea, select") && parts.some((part) => part.contains(typing))) {
    typing.addEventListener("blur", () => { refreshParts(area, state); }, { once: true });
    return;
  }
  const answer = await fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html" } });
  if (!answer.ok) {
    if (state) { state.textContent = `not updated: the page answered ${answer.status}`; }
    return;
  }
  const fresh = new DOMParser().parseFromString(await answer.text(), "text/html");
  for (const part of parts) {
    const next = fresh.getElementById(part.id);
    if (next === null) { continue; }
    const open = Array.from(part.querySelectorAll("details"), (d) => d.open);
    part.replaceChildren(...Array.from(next.childNodes).map((node) => document.adoptNode(node)));  // (a copy first: adopting empties the list)
    part.querySelectorAll("details").forEach((d, i) => { if (open[i]) { d.open = true; } });
    asCards(part);
  }
  if (state) { state.textContent = "live"; }
}

document.addEventListener("DOMContentLoaded", () => {
  for (const area of document.querySelectorAll("[data-live-page]")) {
    const state = area.querySelector("[data-live-state]");
    const source = follow(area.dataset.livePage);
    source.addEventListener("open", () => { if (state) { state.textContent = "live"; } });
    source.addEventListener("changed", () => {
      if (state) { state.textContent = "updating"; }
      refreshParts(area, state).catch(() => { if (state) { state.textContent = "not updated: reload the page"; } });
    });
    source.addEventListener("error", () => {
      if (state) {
        state.textContent = source.readyState === EventSource.CLOSED ? "not live: reload later" : "reconnecting";
      }
    });
  }
});
