// Conversations: the user's app conversations (searched and paged as /app-conversations/search
// allows), the most recently active first, each archived (a tag: hidden from the list until
// "Show archived") or deleted in its row; and the form that starts one, going straight to its
// page (start.js follows the start). The list is read again every few seconds and its rows are
// updated in place: a delete being confirmed, the focus and the scroll stay as they were.
import { api } from "./api.js";
import { badge, clear, cost, field, h, notify, relative, when } from "./dom.js";
import { createStore } from "./store.js";
import { SANDBOX, SANDBOX_ENDED, executionStatus, executionWord, sandboxWord } from "./schema.js";

const ARCHIVED = "archived";

// /count answers {count} or a bare number (OpenHands' shape).
function countOf(total) {
  return typeof total === "number" ? total : Number(total?.count ?? 0);
}

// A title from the first message, at once: its first line, cut at a word near 60 characters.
export function firstTitle(text) {
  const line = String(text).split("\n").map((l) => l.trim()).find(Boolean) || "New conversation";
  if (line.length <= 60) return line;
  const cut = line.slice(0, 60);
  const space = cut.lastIndexOf(" ");
  return `${(space > 30 ? cut.slice(0, space) : cut).trimEnd()}…`;
}

const PAGE_SIZE = 20;

// The list's state: where the person is in the pages, what they search, and the page last read.
export const initialState = Object.freeze({
  pages: [null], // page ids seen: Previous goes back one
  position: 0,
  title: "", // "Title contains…", as typed
  showArchived: false,
  listing: null, // {items, total, nextPageId}: the page last read
  reads: 0, // how many times the list was read (the page's data-reads: a refresh is seen)
  confirming: null, // the id of the conversation whose delete is being confirmed
});

export function update(state, action) {
  switch (action.type) {
    case "typed": // {title}
      return { ...state, title: action.title };
    case "show-archived": // {on}
      return { ...state, showArchived: action.on };
    case "search": // the search form was sent: from the first page
      return { ...state, pages: state.pages.slice(0, 1), position: 0 };
    case "previous":
      return { ...state, position: state.position - 1 };
    case "next": {
      const pages = [...state.pages];
      pages[state.position + 1] = state.listing?.nextPageId ?? null;
      return { ...state, pages, position: state.position + 1 };
    }
    case "listed": // {items, total, nextPageId}: a page of the list as read
      return { ...state, reads: state.reads + 1,
        listing: { items: action.items, total: action.total, nextPageId: action.nextPageId } };
    case "ask-delete": // {id}
      return { ...state, confirming: action.id };
    case "keep": // the delete was not confirmed (or was done)
      return state.confirming === null ? state : { ...state, confirming: null };
    default:
      return state;
  }
}

// What the list asks /app-conversations/search for in this state.
function query(state) {
  return { limit: PAGE_SIZE, page_id: state.pages[state.position], title__contains: state.title.trim(),
    sort_order: "UPDATED_AT_DESC" };
}

export function conversationsPage(main) {
  let stopped = false;

  const title = h("input", { type: "search", name: "title", placeholder: "Title contains…" });
  title.addEventListener("input", () => page.dispatch({ type: "typed", title: title.value }));
  const showArchived = h("input", { type: "checkbox", name: "show-archived" });
  showArchived.addEventListener("change", () => {
    page.dispatch({ type: "show-archived", on: showArchived.checked });
    load();
  });
  const tbody = h("tbody");
  const count = h("p", { class: "muted", "aria-live": "polite" });
  const previous = h("button", { type: "button", disabled: true }, "Previous");
  const next = h("button", { type: "button", disabled: true }, "Next");

  // The rows and the pager, from each page read. A row is kept for its conversation and
  // updated in place (its texts, its place in the order), so what is open in it stays open. The
  // filter, the search and the page number take effect with the next read (each change asks for
  // one at once), so a row never shows under a page it was not read for.
  const rows = new Map(); // conversation id -> {element, set(c, state)}
  const empty = h("tr", {}, h("td", { colspan: 5, class: "muted" }));
  function render(state, before) {
    const { listing } = state;
    if (!listing) return;
    const section = tbody.closest("section");
    if (section) section.dataset.reads = String(state.reads);
    if (listing === before.listing && state.confirming === before.confirming) return;
    const shown = listing.items.filter((c) => state.showArchived || !c.tags?.[ARCHIVED]);
    const ids = new Set(shown.map((c) => c.id));
    for (const [id, kept] of rows) {
      if (!ids.has(id)) {
        kept.element.remove();
        rows.delete(id);
      }
    }
    let at = tbody.firstElementChild;
    for (const c of shown) {
      let kept = rows.get(c.id);
      if (!kept) {
        kept = row(page, load);
        rows.set(c.id, kept);
      }
      kept.set(c, state);
      // Moved only when out of place: a moved element loses the focus.
      if (at !== kept.element) tbody.insertBefore(kept.element, at);
      else at = at.nextElementSibling;
    }
    empty.firstChild.textContent = listing.items.length ? "Only archived conversations here." : "No conversations yet.";
    if (!shown.length) tbody.append(empty);
    else empty.remove();
    if (listing === before.listing) return;
    const n = listing.total;
    const hidden = listing.items.length - shown.length;
    count.textContent = `${n} conversation${n === 1 ? "" : "s"}` +
      (n > PAGE_SIZE ? `, page ${state.position + 1}` : "") + (hidden ? ` (${hidden} archived not shown)` : "");
    previous.disabled = state.position === 0;
    next.disabled = !listing.nextPageId;
  }

  const page = createStore(initialState, update, render);

  async function load() {
    const asked = query(page.state);
    try {
      const [found, total] = await Promise.all([
        api("/app-conversations/search", { query: asked }),
        api("/app-conversations/count", { query: { title__contains: asked.title__contains } }),
      ]);
      if (stopped) return;
      page.dispatch({ type: "listed", items: found.items, total: countOf(total), nextPageId: found.next_page_id });
    } catch (error) {
      notify(`Could not list conversations: ${error.message}`, "error");
    }
  }

  previous.addEventListener("click", () => { page.dispatch({ type: "previous" }); load(); });
  next.addEventListener("click", () => { page.dispatch({ type: "next" }); load(); });
  const search = h("form", { class: "row", role: "search", "aria-label": "Conversations" },
    field("Search by title", title), h("button", { type: "submit" }, "Search"),
    h("label", { class: "check" }, showArchived, " Show archived"));
  search.addEventListener("submit", (event) => {
    event.preventDefault();
    page.dispatch({ type: "search" });
    load();
  });

  main.append(
    h("h1", {}, "Conversations"),
    startForm(),
    h("section", { "aria-labelledby": "list-title" },
      h("h2", { id: "list-title" }, "Your conversations"),
      search, count,
      h("div", { class: "table-wrap" },
        h("table", { class: "list" },
          h("thead", {}, h("tr", {},
            ["Conversation", "Last activity", "Status", "Cost", "Actions"]
              .map((name) => h("th", { scope: "col" }, name)))),
          tbody)),
      h("div", { class: "row pager" }, previous, next)));
  load();
  const timer = setInterval(load, 5000);
  return () => { stopped = true; clearInterval(timer); };
}

// "Finished", "Waiting for your approval", with the sandbox's status when it is not running
// ("Finished · sandbox paused"): in words, never the wire's names.
export function statusWords(c) {
  const execution = executionWord(c.execution_status) || "Not started";
  const sandbox = c.sandbox_status && c.sandbox_status !== SANDBOX.RUNNING
    ? ` · sandbox ${String(sandboxWord(c.sandbox_status)).toLowerCase()}` : "";
  return `${execution}${sandbox}`;
}

// One row, kept while its conversation is listed: `set(c, state)` brings it up to date.
function row(page, reload) {
  let c = null;
  const link = h("a", {});
  const archivedBadge = badge("archived", null, "archived");
  const where = h("span", { class: "muted repo" });
  const time = h("time", { class: "rel" });
  const status = h("span", { class: "badge" });
  const spent = h("span", {});
  const name = () => c.title || `Conversation ${c.id.slice(0, 8)}`;
  const archived = () => Boolean(c.tags?.[ARCHIVED]);

  async function archive() {
    const was = archived();
    const tags = { ...(c.tags || {}) };
    if (was) delete tags[ARCHIVED];
    else tags[ARCHIVED] = "yes";
    try {
      await api(`/app-conversations/${c.id}`, { method: "PATCH", body: { tags } });
      notify(was ? `Restored "${name()}".` : `Archived "${name()}": it is hidden from the list.`);
    } catch (error) {
      notify(`Could not archive: ${error.message}`, "error");
    }
    reload();
  }
  const archiveButton = h("button", { type: "button", class: "link", onclick: archive });
  const confirmDelete = h("button", { type: "button", class: "danger", hidden: true, onclick: async () => {
    try {
      await api(`/app-conversations/${c.id}`, { method: "DELETE" });
      notify(`Deleted "${name()}".`);
    } catch (error) {
      notify(`Could not delete: ${error.message}`, "error");
    }
    page.dispatch({ type: "keep" });
    reload();
  } });
  const cancelDelete = h("button", { type: "button", class: "link", hidden: true,
    onclick: () => page.dispatch({ type: "keep" }) }, "Cancel");
  const deleteButton = h("button", { type: "button", class: "danger-outline", onclick: () => {
    page.dispatch({ type: "ask-delete", id: c.id });
    confirmDelete.focus();
  } }, "Delete");
  const element = h("tr", {},
    h("td", { "data-label": "Conversation", class: "title-cell" }, link, archivedBadge, where),
    h("td", { "data-label": "Last activity" }, time),
    h("td", { "data-label": "Status" }, status),
    h("td", { "data-label": "Cost" }, spent),
    h("td", { "data-label": "Actions", class: "actions" }, archiveButton, " ", deleteButton, confirmDelete, " ", cancelDelete));

  function set(next, state) {
    c = next;
    const title = name();
    element.dataset.conversationId = c.id;
    element.dataset.sandboxId = c.sandbox_id || "";
    element.classList.toggle("dead", SANDBOX_ENDED.has(c.sandbox_status));
    link.href = `#/conversations/${c.id}`;
    link.textContent = title;
    archivedBadge.hidden = !archived();
    where.textContent = c.selected_repository
      ? `${c.selected_repository}${c.selected_branch ? ` @ ${c.selected_branch}` : ""}` : "";
    const at = c.updated_at || c.created_at;
    time.setAttribute("datetime", at || "");
    time.title = at ? when(at) : "";
    time.textContent = at ? relative(at) : "—";
    status.className = `badge badge-${executionStatus(c.execution_status) || "none"}`;
    status.textContent = statusWords(c);
    spent.textContent = cost(c.metrics?.accumulated_cost);
    archiveButton.textContent = archived() ? "Restore" : "Archive";
    archiveButton.setAttribute("aria-label", `${archived() ? "Restore" : "Archive"} ${title}`);
    deleteButton.setAttribute("aria-label", `Delete ${title}`);
    confirmDelete.textContent = `Delete "${title}" for good`;
    const confirming = state.confirming === c.id;
    deleteButton.hidden = confirming;
    confirmDelete.hidden = !confirming;
    cancelDelete.hidden = !confirming;
  }
  return { element, set };
}

// The start form: a message (and, folded, a repository, branch and sandbox). Starting goes
// straight to the start's page, which follows it into the conversation.
function startForm() {
  const message = h("textarea", { name: "message", rows: 2, required: true,
    placeholder: "What should the agent do? (Enter starts, Shift+Enter for a new line)" });
  const repository = h("input", { name: "repository", placeholder: "organization/repository",
    pattern: "[A-Za-z0-9_.\\-]+/[A-Za-z0-9_.\\-]+", autocomplete: "off" });
  const branch = h("input", { name: "branch", placeholder: "main", autocomplete: "off" });
  const placement = h("select", { name: "placement" },
    h("option", { value: "" }, "Automatic (your grouping strategy)"));
  const status = h("p", { class: "start-status", role: "status", "aria-live": "polite" });
  const submit = h("button", { type: "submit" }, "Start conversation");

  api("/sandboxes/search", { query: { limit: 100 } }).then((page) => {
    for (const s of page.items) {
      if (s.status === SANDBOX.RUNNING || s.status === SANDBOX.PAUSED) {
        placement.append(h("option", { value: s.id },
          `${s.name || s.id} (${String(sandboxWord(s.status)).toLowerCase()}, ${s.conversation_count} conversation${s.conversation_count === 1 ? "" : "s"})`));
      }
    }
  }).catch(() => {});

  const form = h("form", { class: "card start", "aria-labelledby": "start-title" },
    h("h2", { id: "start-title" }, "Start a conversation"),
    h("div", { class: "composer" }, field("Message", message), submit),
    h("details", { class: "options" }, h("summary", {}, "Repository and sandbox"),
      h("div", { class: "row" },
        field("Repository", repository, "Optional, e.g. octocat/Hello-World"),
        field("Branch", branch, "Optional"),
        field("Sandbox", placement, "Automatic placement follows the grouping strategy of your settings."))),
    status);
  message.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      if (message.value.trim() && !submit.disabled) form.requestSubmit();
    }
  });

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = {
      initial_message: { role: "user", content: [{ type: "text", text: message.value }], run: true },
      title: firstTitle(message.value),
    };
    if (repository.value.trim()) body.selected_repository = repository.value.trim();
    if (branch.value.trim()) body.selected_branch = branch.value.trim();
    if (placement.value) body.sandbox_id = placement.value;
    submit.disabled = true;
    status.className = "start-status";
    status.textContent = "Starting…";
    try {
      const task = await api("/app-conversations", { method: "POST", body });
      sessionStorage.setItem(`start:${task.id}`, message.value); // shown while it starts
      location.hash = `#/start/${task.id}`;
    } catch (error) {
      status.className = "start-status error";
      status.textContent = `Could not start: ${error.message}`;
      submit.disabled = false;
    }
  });
  return form;
}
