// cvsm dashboard: progressive touches only; every form works without this file.
"use strict";

// The few texts this file writes, in the page's language (`<html lang>`, set by the server).
const TEXTS = {
  id: {copy: "Salin", copyLabel: "Salin nilai ke papan klip", copied: "Tersalin"},
  en: {copy: "Copy", copyLabel: "Copy the value to the clipboard", copied: "Copied"},
};
const text = (key) => (TEXTS[document.documentElement.lang] || TEXTS.id)[key];

document.addEventListener("DOMContentLoaded", () => {
  // A copy button next to each revealed value.
  for (const value of document.querySelectorAll("[data-secret-value]")) {
    if (!navigator.clipboard) break;
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = text("copy");
    button.setAttribute("aria-label", text("copyLabel"));
    button.addEventListener("click", async () => {
      await navigator.clipboard.writeText(value.textContent);
      button.textContent = text("copied");
    });
    value.after(button);
  }
  // Ask before a destructive form is sent.
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }
});

// The admin plan form: choosing a plan fills in its default quotas (still editable; empty means
// unlimited). Without this file the "Isi bawaan" button does the same with a page load.
document.addEventListener("DOMContentLoaded", () => {
  const form = document.querySelector("form[data-plan-form]");
  if (!form) return;
  form.elements.plan.addEventListener("change", () => {
    const chosen = form.elements.plan.selectedOptions[0];
    form.elements.max_secrets.value = chosen.dataset.maxSecrets;
    form.elements.max_members.value = chosen.dataset.maxMembers;
  });
});

// Phones (app.css, below 600 px): each table row is shown as a card and each cell under its
// column's heading, copied here into `data-label`. `display: block` makes browsers drop a
// table's meaning, so its roles are set explicitly: screen readers still read a table.
document.addEventListener("DOMContentLoaded", () => {
  const roles = [["table", "table"], ["thead, tbody, tfoot", "rowgroup"], ["tr", "row"],
    ["th[scope=col]", "columnheader"], ["th[scope=row]", "rowheader"], ["td", "cell"]];
  for (const table of document.querySelectorAll("main table")) {
    for (const [selector, role] of roles) {
      if (table.matches(selector)) table.setAttribute("role", role);
      for (const node of table.querySelectorAll(selector)) {
        if (node.closest("table") === table) node.setAttribute("role", role);
      }
    }
    const head = table.tHead && table.tHead.rows[0];
    if (!head) continue;
    const labels = [];
    for (const cell of head.cells) {
      for (let i = 0; i < cell.colSpan; i++) labels.push(cell.textContent.trim());
    }
    for (const body of table.tBodies) {
      for (const row of body.rows) {
        let column = 0;
        for (const cell of row.cells) {
          const label = labels[column];
          if (cell.colSpan === 1 && label && !cell.hasAttribute("data-label")) {
            cell.dataset.label = label;
          }
          column += cell.colSpan;
        }
      }
    }
  }
});
