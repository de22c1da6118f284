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
