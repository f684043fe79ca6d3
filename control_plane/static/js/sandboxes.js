// Sandboxes: status and why ("Paused: idle for 30 min"), conversations, when the idle and
// deletion timers act; pause, resume and delete (which asks for the sandbox's id, as the API
// does).
import { api } from "./api.js";
import { badge, clear, field, h, notify, timeElement } from "./dom.js";
import { extraDetail, statusLine } from "./status.js";

export function sandboxesPage(main) {
  let stopped = false;
  const list = h("ul", { class: "sandboxes", "aria-label": "Sandboxes" });
  main.append(h("h1", {}, "Sandboxes"),
    h("p", { class: "muted" }, "Pausing or deleting a sandbox affects every conversation in it."),
    list);

  async function load() {
    try {
      const [page, conversations] = await Promise.all([
        api("/sandboxes/search", { query: { limit: 100 } }),
        api("/app-conversations/search", { query: { limit: 100 } }),
      ]);
      if (stopped) return;
      clear(list);
      if (!page.items.length) list.append(h("li", { class: "muted" }, "No sandboxes yet."));
      for (const sandbox of page.items) {
        const mine = conversations.items.filter((c) => c.sandbox_id === sandbox.id);
        list.append(card(sandbox, mine));
      }
    } catch (error) {
      notify(`Could not list sandboxes: ${error.message}`, "error");
    }
  }

  async function act(sandbox, action) {
    try {
      await api(`/sandboxes/${sandbox.id}/${action}`, { method: "POST" });
      notify(`Sandbox ${sandbox.id}: ${action === "pause" ? "paused" : "resumed"}.`);
    } catch (error) {
      notify(`Could not ${action} sandbox ${sandbox.id}: ${error.message}`, "error");
    }
    load();
  }

  function deleteForm(sandbox) {
    const confirmInput = h("input", { name: "confirm-id", autocomplete: "off", spellcheck: "false" });
    const form = h("form", { class: "delete" },
      field(`Type the sandbox id (${sandbox.id}) to delete it`, confirmInput),
      h("button", { type: "submit", class: "danger" }, "Delete sandbox"));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      if (confirmInput.value.trim() !== sandbox.id) {
        notify("The id typed is not this sandbox's: nothing was deleted.", "error");
        confirmInput.focus();
        return;
      }
      try {
        await api(`/sandboxes/${sandbox.id}`, { method: "DELETE", query: { sandbox_id: confirmInput.value.trim() } });
        notify(`Sandbox ${sandbox.id} deleted.`);
      } catch (error) {
        notify(`Could not delete: ${error.message}`, "error");
      }
      load();
    });
    return form;
  }

  function why(sandbox) {
    if (!sandbox.status_reason && !sandbox.status_detail) return null;
    const line = statusLine(sandbox.status, sandbox.status_reason, sandbox.status_detail);
    const more = extraDetail(line, sandbox.status_detail);
    return h("div", { class: "why" }, h("p", { class: "why-line" }, line),
      more ? h("p", { class: "muted" }, more) : null);
  }

  function card(sandbox, conversations) {
    const live = sandbox.status === "RUNNING" || sandbox.status === "PAUSED" || sandbox.status === "STARTING";
    const titleId = `sandbox-${sandbox.id}`;
    return h("li", { class: "card sandbox", dataset: { sandboxId: sandbox.id }, "aria-labelledby": titleId },
      h("h2", { id: titleId }, "Sandbox ", h("code", {}, sandbox.id), " ", badge(sandbox.status, "Status")),
      why(sandbox),
      h("dl", { class: "meta" },
        h("div", {}, h("dt", {}, "Conversations"), h("dd", {}, String(sandbox.conversation_count))),
        h("div", {}, h("dt", {}, "Last activity"), h("dd", {}, timeElement(sandbox.last_activity_at))),
        h("div", {}, h("dt", {}, "Pauses when idle at"), h("dd", {}, timeElement(sandbox.pause_at))),
        h("div", {}, h("dt", {}, "Deleted at"), h("dd", {}, timeElement(sandbox.delete_at)))),
      conversations.length ? h("ul", { class: "inline", "aria-label": "Its conversations" },
        conversations.map((c) => h("li", {}, h("a", { href: `#/conversations/${c.id}` },
          c.title || `Conversation ${c.id.slice(0, 8)}`)))) : null,
      live ? h("div", { class: "row" },
        sandbox.status === "RUNNING" ? h("button", { type: "button", onclick: () => act(sandbox, "pause") }, "Pause") : null,
        sandbox.status === "PAUSED" ? h("button", { type: "button", onclick: () => act(sandbox, "resume") }, "Resume") : null) : null,
      live ? deleteForm(sandbox) : null);
  }

  load();
  return () => { stopped = true; };
}
