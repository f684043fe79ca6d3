// Sandboxes: each by its name ("brisk-otter-42", renamed in place; never its 32-hex id), its
// status and why ("Paused: idle for 30 min"), conversations, when the idle and deletion timers
// act, its network in words; pause, resume, delete (asked once, in place, by name), its network
// changed in place (network.js) and what it refused.
// The list is read again every 5 s: a card changes what it shows and keeps what is being typed
// in it (an open network editor, a name being changed, a delete being confirmed), and its focus.
import { api } from "./api.js";
import { append, badge, clear, field, h, notify, timeElement } from "./dom.js";
import { fillNetwork, networkFieldset, policyWords, readNetwork, refusalLine, showProblems } from "./network.js";
import { extraDetail, statusLine } from "./status.js";
import { createStore } from "./store.js";
import { SANDBOX, sandboxWord } from "./schema.js";

// The page's state: the list as last read. Reads are numbered; an answer older than the one
// drawn is dropped (a slow read must not bring back a sandbox just deleted).
export const initialState = Object.freeze({
  shown: 0, // the number of the read drawn
  sandboxes: null, // its sandboxes, in its order
  conversations: [], // the user's conversations, to list each sandbox's
});

export function update(state, action) {
  switch (action.type) {
    case "listed": // {read, sandboxes, conversations}
      if (action.read < state.shown) return state;
      return { shown: action.read, sandboxes: action.sandboxes, conversations: action.conversations };
    default:
      return state;
  }
}

export function sandboxesPage(main) {
  let stopped = false;
  let asked = 0; // reads of the list, numbered
  const cards = new Map(); // sandbox id -> its card ({element, show}): drawn once, then updated
  const list = h("ul", { class: "sandboxes", "aria-label": "Sandboxes" });
  const empty = h("li", { class: "muted" }, "No sandboxes yet.");
  main.append(h("h1", {}, "Sandboxes"),
    h("p", { class: "muted" }, "Pausing or deleting a sandbox affects every conversation in it."),
    list);

  function render(state) {
    const ids = new Set(state.sandboxes.map((sandbox) => sandbox.id));
    for (const [id, card] of cards) {
      if (ids.has(id)) continue;
      card.element.remove();
      cards.delete(id);
    }
    if (!state.sandboxes.length) list.replaceChildren(empty);
    else empty.remove();
    state.sandboxes.forEach((sandbox, i) => {
      let card = cards.get(sandbox.id);
      if (!card) cards.set(sandbox.id, (card = sandboxCard(sandbox.id, load)));
      card.show(sandbox, state.conversations.filter((c) => c.sandbox_id === sandbox.id));
      // In the answer's order, moving only a card out of place (a move takes the focus away).
      const here = list.children[i];
      if (here !== card.element) list.insertBefore(card.element, here || null);
    });
  }

  const page = createStore(initialState, update, render);

  async function load() {
    const read = ++asked;
    try {
      const [found, conversations] = await Promise.all([
        api("/sandboxes/search", { query: { limit: 100 } }),
        api("/app-conversations/search", { query: { limit: 100 } }),
      ]);
      if (stopped) return;
      page.dispatch({ type: "listed", read, sandboxes: found.items, conversations: conversations.items });
    } catch (error) {
      if (!stopped) notify(`Could not list sandboxes: ${error.message}`, "error");
    }
  }

  load();
  const timer = setInterval(load, 5000);
  return () => { stopped = true; clearInterval(timer); };
}

// A card's state: the sandbox's record and its conversations as last read, and what is open
// in it. The forms in it (network, delete) are made once and keep what is typed in them.
export const cardState = Object.freeze({
  sandbox: null,
  conversations: [],
  editing: false, // the network editor is open
  saving: null, // the network editor's line: null, "Saving…" or why it was not saved
  checking: false, // "What was refused" is open
  refused: null, // what was refused: {reading}, {error} or GET /sandboxes/{id}/network's answer
  renaming: false, // the name's editor is open
  naming: null, // its line: null, "Saving…" or why the name was not taken
  deleting: false, // "Delete <name>?" is asked
});

// Whether a sandbox in this status can be changed (not ERROR or MISSING).
function live(sandbox) {
  return [SANDBOX.RUNNING, SANDBOX.PAUSED, SANDBOX.STARTING].includes(sandbox.status);
}

export function updateCard(state, action) {
  switch (action.type) {
    case "read": { // {sandbox, conversations}
      const next = { ...state, sandbox: action.sandbox, conversations: action.conversations };
      // Nothing of the network applies to a sandbox in ERROR or MISSING any more.
      return live(action.sandbox) ? next : { ...next, editing: false, checking: false, deleting: false };
    }
    case "edit":
      return { ...state, editing: true, saving: null };
    case "close-editor":
      return { ...state, editing: false };
    case "saving": // {words}: the editor's line (null: none)
      return { ...state, saving: action.words };
    case "check": // "What was refused" opened or closed
      return { ...state, checking: !state.checking };
    case "refused": // {refused}
      return { ...state, refused: action.refused };
    case "rename":
      return { ...state, renaming: true, naming: null };
    case "close-rename":
      return { ...state, renaming: false, naming: null };
    case "naming": // {words}: the name editor's line (null: none)
      return { ...state, naming: action.words };
    case "ask-delete":
      return { ...state, deleting: true };
    case "keep":
      return { ...state, deleting: false };
    default:
      return state;
  }
}

function sandboxCard(id, reload) {
  let drawn = ""; // the record drawn, as JSON
  const titleId = `sandbox-${id}`;
  const view = h("div");
  const policy = h("p", { class: "policy" });

  // What a person calls it: its name (the id only for a record older than names).
  const called = () => card.state.sandbox?.name || id;

  async function act(action) {
    try {
      await api(`/sandboxes/${id}/${action}`, { method: "POST" });
      notify(`Sandbox ${called()}: ${action === "pause" ? "paused" : "resumed"}.`);
    } catch (error) {
      notify(`Could not ${action} sandbox ${called()}: ${error.message}`, "error");
    }
    reload();
  }
  const pause = h("button", { type: "button", onclick: () => act("pause") }, "Pause");
  const resume = h("button", { type: "button", onclick: () => act("resume") }, "Resume");

  // The network editor: the policy's fieldset, applied at once by Save.
  const fieldset = networkFieldset(null, { legend: "Network of this sandbox",
    hint: "Applied at once: new connections meet it, open ones go on." });
  const saveNetwork = h("button", { type: "submit" }, "Save");
  const saved = h("p", { class: "form-result", role: "status", "aria-live": "polite" });
  const editor = h("form", { class: "network-editor", id: `${titleId}-network`, hidden: true },
    fieldset, h("div", { class: "row" }, saveNetwork,
      h("button", { type: "button", onclick: () => closeEditor() }, "Cancel")), saved);
  const networkButton = h("button", { type: "button", "aria-expanded": "false", "aria-controls": editor.id,
    "aria-describedby": titleId, onclick: () => (editor.hidden ? openEditor() : closeEditor()) }, "Network");

  function openEditor() {
    card.dispatch({ type: "edit" });
    fieldset.querySelector("input:checked")?.focus();
  }

  // `focus`: back to the Network button (when the focus was in the editor, not elsewhere).
  function closeEditor(focus = editor.contains(document.activeElement)) {
    card.dispatch({ type: "close-editor" });
    if (focus) networkButton.focus();
  }

  editor.addEventListener("submit", async (event) => {
    event.preventDefault();
    const focused = editor.contains(document.activeElement); // before Save is disabled, which drops it
    showProblems(fieldset, null, []);
    card.dispatch({ type: "saving", words: "Saving…" });
    saveNetwork.disabled = true;
    try {
      const changed = await api(`/sandboxes/${id}`, { method: "PATCH", body: { network_policy: readNetwork(fieldset) } });
      card.dispatch({ type: "read", sandbox: changed, conversations: card.state.conversations });
      closeEditor(focused);
      notify(`Sandbox ${called()}: ${policyWords(changed.network_policy)}.`);
      reload();
    } catch (error) {
      card.dispatch({ type: "saving", words: showProblems(fieldset, error, ["body", "network_policy"])
        ? "Not saved: a rule was refused." : `Could not change its network: ${error.message}` });
    } finally {
      saveNetwork.disabled = false;
    }
  });

  // What its policy refused it, read when asked ("Check again" reads it anew).
  const refusedSummary = h("p");
  const refusedList = h("ul", { class: "refused", "aria-label": "Refused in the last ten minutes" });
  const refusals = h("div", { class: "refusals", id: `${titleId}-refused`, hidden: true },
    h("div", { "aria-live": "polite" }, refusedSummary, refusedList),
    h("button", { type: "button", class: "link", onclick: () => checkRefused() }, "Check again"));
  const refusedButton = h("button", { type: "button", "aria-expanded": "false", "aria-controls": refusals.id,
    "aria-describedby": titleId, onclick: () => {
      if (card.dispatch({ type: "check" }).checking) checkRefused();
    } }, "What was refused");

  async function checkRefused() {
    card.dispatch({ type: "refused", refused: { reading: true } });
    let refused;
    try {
      refused = await api(`/sandboxes/${id}/network`);
    } catch (error) {
      refused = { error: error.message };
    }
    card.dispatch({ type: "refused", refused });
  }

  // Its name, changed in place (PATCH name; a name another of yours has is refused).
  const nameInput = h("input", { name: "sandbox-name", autocomplete: "off", spellcheck: "false",
    required: true, maxlength: 64 });
  const named = h("p", { class: "form-result", role: "status", "aria-live": "polite" });
  const renamer = h("form", { class: "rename-sandbox", id: `${titleId}-rename`, hidden: true },
    field("New name", nameInput, "Letters, digits, spaces, . - and _."),
    h("div", { class: "row" }, h("button", { type: "submit" }, "Save name"),
      h("button", { type: "button", onclick: () => closeRename(true) }, "Cancel")), named);
  const renameButton = h("button", { type: "button", "aria-expanded": "false", "aria-controls": renamer.id,
    "aria-describedby": titleId, onclick: () => (renamer.hidden ? openRename() : closeRename(true)) }, "Rename");

  function openRename() {
    nameInput.value = called();
    card.dispatch({ type: "rename" });
    nameInput.select();
    nameInput.focus();
  }

  function closeRename(focus) {
    card.dispatch({ type: "close-rename" });
    if (focus) renameButton.focus();
  }

  renamer.addEventListener("submit", async (event) => {
    event.preventDefault();
    const name = nameInput.value.trim();
    card.dispatch({ type: "naming", words: "Saving…" });
    try {
      const changed = await api(`/sandboxes/${id}`, { method: "PATCH", body: { name } });
      card.dispatch({ type: "read", sandbox: changed, conversations: card.state.conversations });
      closeRename(true);
      notify(`Sandbox renamed ${changed.name}.`);
      reload();
    } catch (error) {
      const refused = error.status === 422 ? "Not saved: a name is letters, digits, spaces, . - and _, "
        + "starting and ending with a letter or a digit (64 at most)."
        : error.status === 409 ? `Not saved: another of your sandboxes is named ${name}.`
          : `Could not rename it: ${error.message}`;
      card.dispatch({ type: "naming", words: refused });
      nameInput.focus();
    }
  });

  // Delete: asked once, in place, by its name (the API's repeated sandbox_id is sent for you).
  const deleteButton = h("button", { type: "button", class: "danger-outline", onclick: () => {
    card.dispatch({ type: "ask-delete" });
    deleteQuestion.querySelector("button.danger")?.focus();
  } }, "Delete sandbox");
  const question = h("span");
  const deleteQuestion = h("div", { class: "row delete-confirm", role: "group", hidden: true,
    "aria-label": "Delete this sandbox?" },
    question,
    h("button", { type: "button", class: "danger", onclick: () => remove() }, "Delete"),
    h("button", { type: "button", onclick: () => {
      card.dispatch({ type: "keep" });
      deleteButton.focus();
    } }, "Cancel"));
  const removal = h("div", { class: "delete" }, deleteButton, deleteQuestion);

  async function remove() {
    const name = called();
    try {
      await api(`/sandboxes/${id}`, { method: "DELETE", query: { sandbox_id: id } });
      notify(`Sandbox ${name} deleted.`);
    } catch (error) {
      notify(`Could not delete sandbox ${name}: ${error.message}`, "error");
    }
    card.dispatch({ type: "keep" });
    reload();
  }

  const element = h("li", { class: "card sandbox", dataset: { sandboxId: id }, "aria-labelledby": titleId },
    view, policy,
    h("div", { class: "row" }, pause, resume, renameButton, networkButton, refusedButton),
    renamer, editor, refusals, removal);

  // The record's part, redrawn only when what it shows changed.
  function showRecord({ sandbox: next, conversations: its }) {
    const said = JSON.stringify([next, its.map((c) => [c.id, c.title])]);
    if (said === drawn) return;
    drawn = said;
    append(clear(view), [
      h("h2", { id: titleId }, h("span", { class: "sandbox-name" }, next.name || id), " ",
        badge(next.status, "Status", sandboxWord(next.status))),
      why(next),
      h("dl", { class: "meta" },
        h("div", {}, h("dt", {}, "Conversations"), h("dd", {}, String(next.conversation_count))),
        h("div", {}, h("dt", {}, "Last activity"), h("dd", {}, timeElement(next.last_activity_at))),
        h("div", {}, h("dt", {}, "Pauses when idle at"), h("dd", {}, timeElement(next.pause_at))),
        h("div", {}, h("dt", {}, "Deleted at"), h("dd", {}, timeElement(next.delete_at))),
        next.disk ? h("div", {}, h("dt", {}, "Disk"), h("dd", {}, diskWords(next.disk))) : null),
      its.length ? h("ul", { class: "inline", "aria-label": "Its conversations" },
        its.map((c) => h("li", {}, h("a", { href: `#/conversations/${c.id}` },
          c.title || `Conversation ${c.id.slice(0, 8)}`)))) : null]);
    clear(policy).append(h("span", { class: "label" }, "Network: "), policyWords(next.network_policy));
    const changeable = live(next);
    pause.hidden = next.status !== SANDBOX.RUNNING;
    resume.hidden = next.status !== SANDBOX.PAUSED;
    networkButton.hidden = refusedButton.hidden = removal.hidden = !changeable;
    const n = next.conversation_count;
    question.textContent = `Delete ${next.name || id}${n ? ` and its ${n === 1 ? "conversation" : `${n} conversations`}`
      : ""}? ${n ? "They stay readable, read-only; " : ""}its workspace is removed.`;
  }

  function showRefused(refused) {
    clear(refusedList);
    if (refused.reading) {
      refusedSummary.textContent = "Reading…";
    } else if (refused.error !== undefined) {
      refusedSummary.textContent = `Could not read what was refused: ${refused.error}`;
    } else {
      if (!refused.enforced) {
        refusedSummary.textContent = "Nothing holds this sandbox to its policy: this control plane "
          + "runs it without a network boundary.";
      } else {
        const n = refused.refused ?? 0;
        refusedSummary.textContent = `${n} connection${n === 1 ? "" : "s"} refused while it ran`
          + (refused.recent.length ? "; the latest, in the last ten minutes:" : "; none in the last ten minutes.");
      }
      for (const refusal of refused.recent) refusedList.append(h("li", {}, refusalLine(refusal)));
    }
  }

  function render(state, previous) {
    if (state.sandbox !== previous.sandbox || state.conversations !== previous.conversations) showRecord(state);
    if (state.editing && !previous.editing) fillNetwork(fieldset, state.sandbox.network_policy);
    editor.hidden = !state.editing;
    networkButton.setAttribute("aria-expanded", String(state.editing));
    if (state.saving !== previous.saving) saved.textContent = state.saving ?? "";
    refusals.hidden = !state.checking;
    refusedButton.setAttribute("aria-expanded", String(state.checking));
    if (state.refused && state.refused !== previous.refused) showRefused(state.refused);
    renamer.hidden = !state.renaming;
    renameButton.setAttribute("aria-expanded", String(state.renaming));
    if (state.naming !== previous.naming) named.textContent = state.naming ?? "";
    deleteQuestion.hidden = !state.deleting;
    deleteButton.hidden = state.deleting;
  }

  const card = createStore(cardState, updateCard, render);
  return { element, show: (sandbox, conversations) => card.dispatch({ type: "read", sandbox, conversations }) };
}

/** "1.2 GiB of 8 GiB used (15 %)": what the sandbox's own filesystem holds. */
function diskWords(disk) {
  const share = disk.limit ? Math.round((100 * disk.used) / disk.limit) : 0;
  return `${bytes(disk.used)} of ${bytes(disk.limit)} used (${share} %)`;
}

function bytes(n) {
  const units = ["bytes", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${i ? n.toFixed(n < 10 ? 1 : 0) : n} ${units[i]}`;
}

function why(sandbox) {
  if (!sandbox.status_reason && !sandbox.status_detail) return null;
  const line = statusLine(sandbox.status, sandbox.status_reason, sandbox.status_detail);
  const more = extraDetail(line, sandbox.status_detail);
  return h("div", { class: "why" }, h("p", { class: "why-line" }, line),
    more ? h("p", { class: "muted" }, more) : null);
}
