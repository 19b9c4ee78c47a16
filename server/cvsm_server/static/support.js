// cvsm support page: asks and escalates without a reload. Without this file the same forms post
// and the page comes back with the conversation.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const root = document.querySelector("[data-support]");
  if (!root || !window.fetch) return;
  const log = root.querySelector("#percakapan");
  const ask = root.querySelector("form[data-support-ask]");

  // `html` is the server's rendering of an answer's Markdown (raw HTML in it already escaped).
  function addMessage(author, label, body, articles, html) {
    const item = document.createElement("li");
    item.className = `message ${author}`;
    const who = document.createElement("p");
    who.className = "author";
    who.textContent = label;
    const text = document.createElement("div");
    text.className = "body";
    if (html) {
      text.classList.add("markdown");
      text.innerHTML = html;
    } else {
      text.textContent = body;
    }
    item.append(who, text);
    if (articles && articles.length) {
      const sources = document.createElement("p");
      sources.className = "sources";
      const label = document.documentElement.lang === "en" ? "Sources: " : "Sumber: ";
      sources.textContent = label + articles.map((a) => a.title).join("; ");
      item.append(sources);
    }
    log.append(item);
  }

  async function post(form) {
    const response = await fetch(form.action, {
      method: "POST",
      body: new URLSearchParams(new FormData(form)),
      headers: { Accept: "application/json" },
      credentials: "same-origin",
    });
    let body = {};
    try { body = await response.json(); } catch (_) { body = {}; }
    if (!response.ok) throw new Error(body.error || (document.documentElement.lang === "en"
      ? "The request failed; try again." : "Permintaan gagal; coba lagi."));
    return body;
  }

  ask.addEventListener("submit", async (event) => {
    event.preventDefault();
    const error = ask.querySelector("[data-support-error]");
    const field = ask.elements.message;
    const button = ask.querySelector("button[type=submit]");
    const question = field.value;
    error.textContent = "";
    button.disabled = true;
    try {
      const answer = await post(ask);
      const english = document.documentElement.lang === "en";
      addMessage("user", english ? "You" : "Anda", question);
      addMessage("assistant", english ? "Assistant" : "Asisten", answer.answer, answer.articles,
                 answer.answer_html);
      const fresh = !ask.elements.conversation_id.value;
      ask.elements.conversation_id.value = answer.conversation_id;
      field.value = "";
      // A first question opens a conversation that can be escalated: reload into it once.
      if (fresh && !root.querySelector("form[data-support-escalate]")) {
        window.history.replaceState(null, "", `/app/support?c=${answer.conversation_id}`);
        window.location.reload();
      }
    } catch (problem) {
      error.textContent = problem.message;
    } finally {
      button.disabled = false;
      field.focus();
    }
  });

  const escalate = root.querySelector("form[data-support-escalate]");
  if (escalate) {
    escalate.addEventListener("submit", async (event) => {
      event.preventDefault();
      const error = escalate.querySelector("[data-support-escalate-error]");
      error.textContent = "";
      try {
        const result = await post(escalate);
        const notice = document.createElement("p");
        notice.className = "notice";
        notice.setAttribute("role", "status");
        notice.textContent = result.notice;
        escalate.replaceWith(notice);
      } catch (problem) {
        error.textContent = problem.message;
      }
    });
  }
});
