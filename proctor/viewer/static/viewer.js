// The viewer's only script (the page's CSP allows no other): filters that apply on change, and
// the index's live refresh. It never inserts HTML it built from data: new rows come as a page the
// server rendered and escaped, parsed by DOMParser (which runs no script) and moved in as nodes.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  for (const select of document.querySelectorAll("select[data-autosubmit]")) {
    select.addEventListener("change", () => select.form.submit());
  }
  const summary = document.getElementById("summary");
  const live = document.getElementById("live");
  if (!summary || !live) return;
  let generation = summary.dataset.generation;

  async function poll() {
    if (!live.checked || document.hidden) return;
    try {
      const reply = await fetch("/api/generation", { cache: "no-store" });
      const now = String((await reply.json()).generation);
      if (now === generation) return;
      const page = await fetch(window.location.href, { cache: "no-store" });
      const doc = new DOMParser().parseFromString(await page.text(), "text/html");
      for (const id of ["rollouts", "summary"]) {
        const fresh = doc.getElementById(id);
        const old = document.getElementById(id);
        if (fresh && old) old.replaceWith(document.adoptNode(fresh));
      }
      generation = document.getElementById("summary").dataset.generation;
    } catch (err) {
      // The viewer stopped or the network hiccupped: try again on the next tick.
    }
  }
  setInterval(poll, 2000);
});
