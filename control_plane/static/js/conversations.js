// Conversations: the user's app conversations (searched and paged as /app-conversations/search
// allows) and the form that starts one, following its start task until READY or ERROR.
import { api } from "./api.js";
import { badge, clear, cost, field, h, notify, timeElement } from "./dom.js";
import { execution } from "./status.js";

const PAGE_SIZE = 20;

export function conversationsPage(main) {
  let stopped = false;
  const pages = [null]; // page ids seen: Previous goes back one
  let position = 0;
  let nextPageId = null;

  const title = h("input", { type: "search", name: "title", placeholder: "Title contains…" });
  const tbody = h("tbody");
  const count = h("p", { class: "muted", "aria-live": "polite" });
  const previous = h("button", { type: "button", disabled: true }, "Previous");
  const next = h("button", { type: "button", disabled: true }, "Next");

  async function load() {
    const query = { limit: PAGE_SIZE, page_id: pages[position], title__contains: title.value.trim() };
    try {
      const [page, total] = await Promise.all([
        api("/app-conversations/search", { query }),
        api("/app-conversations/count", { query: { title__contains: query.title__contains } }),
      ]);
      if (stopped) return;
      nextPageId = page.next_page_id;
      clear(tbody);
      for (const c of page.items) tbody.append(row(c));
      if (!page.items.length) {
        tbody.append(h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No conversations yet.")));
      }
      count.textContent = `${total} conversation${total === 1 ? "" : "s"}` +
        (total > PAGE_SIZE ? `, page ${position + 1}` : "");
      previous.disabled = position === 0;
      next.disabled = !nextPageId;
    } catch (error) {
      notify(`Could not list conversations: ${error.message}`, "error");
    }
  }

  previous.addEventListener("click", () => { position -= 1; load(); });
  next.addEventListener("click", () => {
    pages[position + 1] = nextPageId;
    position += 1;
    load();
  });
  const search = h("form", { class: "row", role: "search", "aria-label": "Conversations" },
    field("Search by title", title), h("button", { type: "submit" }, "Search"));
  search.addEventListener("submit", (event) => {
    event.preventDefault();
    pages.length = 1;
    position = 0;
    load();
  });

  main.append(
    h("h1", {}, "Conversations"),
    startForm(() => load(), () => stopped),
    h("section", { "aria-labelledby": "list-title" },
      h("h2", { id: "list-title" }, "Your conversations"),
      search, count,
      h("div", { class: "table-wrap" },
        h("table", { class: "list" },
          h("thead", {}, h("tr", {},
            ["Title", "Repository", "Sandbox", "Sandbox status", "Execution", "Cost"]
              .map((name) => h("th", { scope: "col" }, name)))),
          tbody)),
      h("div", { class: "row pager" }, previous, next)));
  load();
  const timer = setInterval(load, 5000);
  return () => { stopped = true; clearInterval(timer); };
}

function row(c) {
  const repository = c.selected_repository
    ? `${c.selected_repository}${c.selected_branch ? ` @ ${c.selected_branch}` : ""}` : "—";
  return h("tr", { dataset: { conversationId: c.id, sandboxId: c.sandbox_id } },
    h("td", { "data-label": "Title" },
      h("a", { href: `#/conversations/${c.id}` }, c.title || `Conversation ${c.id.slice(0, 8)}`),
      h("br"), timeElement(c.created_at)),
    h("td", { "data-label": "Repository" }, repository),
    h("td", { "data-label": "Sandbox" }, h("code", { class: "sandbox-id" }, c.sandbox_id)),
    h("td", { "data-label": "Sandbox status" }, badge(c.sandbox_status, "Sandbox")),
    h("td", { "data-label": "Execution" }, badge(execution(c), "Execution")),
    h("td", { "data-label": "Cost" }, cost(c.metrics?.accumulated_cost)));
}

function startForm(onReady, isStopped) {
  const message = h("textarea", { name: "message", rows: 3, required: true });
  const repository = h("input", { name: "repository", placeholder: "organization/repository",
    pattern: "[A-Za-z0-9_.\\-]+/[A-Za-z0-9_.\\-]+", autocomplete: "off" });
  const branch = h("input", { name: "branch", placeholder: "main", autocomplete: "off" });
  const placement = h("select", { name: "placement" },
    h("option", { value: "" }, "Automatic (your grouping strategy)"));
  const progress = h("ol", { class: "progress", "aria-label": "Start progress" });
  const status = h("p", { class: "start-status", role: "status", "aria-live": "polite" });
  const submit = h("button", { type: "submit" }, "Start conversation");

  api("/sandboxes/search", { query: { limit: 100 } }).then((page) => {
    for (const s of page.items) {
      if (s.status === "RUNNING" || s.status === "PAUSED") {
        placement.append(h("option", { value: s.id },
          `Sandbox ${s.id} (${s.status}, ${s.conversation_count} conversation${s.conversation_count === 1 ? "" : "s"})`));
      }
    }
  }).catch(() => {});

  const form = h("form", { class: "card", "aria-labelledby": "start-title" },
    h("h2", { id: "start-title" }, "Start a conversation"),
    field("Message", message),
    h("div", { class: "row" },
      field("Repository", repository, "Optional, e.g. octocat/Hello-World"),
      field("Branch", branch, "Optional")),
    field("Sandbox", placement, "Automatic placement follows the grouping strategy of your settings."),
    submit, status, progress);

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = {
      initial_message: { role: "user", content: [{ type: "text", text: message.value }], run: true },
    };
    if (repository.value.trim()) body.selected_repository = repository.value.trim();
    if (branch.value.trim()) body.selected_branch = branch.value.trim();
    if (placement.value) body.sandbox_id = placement.value;
    submit.disabled = true;
    clear(progress);
    status.className = "start-status";
    status.textContent = "Starting…";
    try {
      let task = await api("/app-conversations", { method: "POST", body });
      let shown = null;
      while (!isStopped()) {
        if (task.status !== shown) {
          progress.append(h("li", {}, task.status));
          shown = task.status;
        }
        if (task.status === "READY") {
          status.className = "start-status ok";
          status.textContent = "READY: ";
          status.append(h("a", { href: `#/conversations/${task.app_conversation_id}` },
            "open the conversation"), ` (sandbox ${task.sandbox_id})`);
          message.value = "";
          onReady();
          break;
        }
        if (task.status === "ERROR") {
          status.className = "start-status error";
          status.textContent = `ERROR: ${task.detail || "the start failed"}`;
          break;
        }
        status.textContent = `${task.status}…`;
        await new Promise((resolve) => setTimeout(resolve, 400));
        [task] = await api("/app-conversations/start-tasks", { query: { ids: task.id } });
      }
    } catch (error) {
      status.className = "start-status error";
      status.textContent = `Could not start: ${error.message}`;
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}
