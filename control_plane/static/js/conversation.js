// One conversation as a chat: its events live (the page follows the newest unless you scroll
// up), the message box pinned at the bottom (Enter sends, Shift+Enter a new line), a progress
// line while the agent works, the title renamed in place, pause, interrupt, confirmation,
// delete, the workspace and the trajectory; a failed run retried with the current model
// settings from its error. Read-only once its sandbox is ERROR or MISSING (SPEC 3.1).
//
// The page's state is one object (`initialState`), changed only by `update` with the actions
// below: the records the page reads, the live stream's events and state, and what the person
// did. `render` draws the header, the controls and the confirmation from it. The transcript is
// the event log's (events.js), which takes the same events in order and only ever grows.
import { api, download, follow } from "./api.js";
import { badge, clear, cost, field, h, notify } from "./dom.js";
import { EventLog } from "./events.js";
import { reasonText } from "./status.js";
import { Progress } from "./progress.js";
import { workspacePanel } from "./workspace.js";
import { titleEditor } from "./title.js";
import { followNewest } from "./scroll.js";
import { createStore } from "./store.js";
import {
  CONFIRMATION,
  EVENT,
  EXECUTION,
  SANDBOX_ENDED,
  STATE_KEY,
  executionStatus,
  executionWord,
  sandboxWord,
} from "./schema.js";

export const initialState = Object.freeze({
  record: null, // the app conversation as last read (with the live stream's newer status)
  sandbox: null, // its sandbox's record: why it is in its status (null: unknown)
  missing: false, // the conversation is not there (or not this user's)
  progress: null, // the execution status the progress line follows
  since: null, // ms: when that status began (a message sent, the stream's event), null: unknown
  answered: false, // the confirmation was answered: hidden until the record says more
  live: "connecting…", // the live stream's state, in words
  deleting: false, // "Delete this conversation?" is asked
});

// Whether a record's sandbox has ended (ERROR, MISSING): its conversation is read-only.
export function readOnly(record) {
  return Boolean(record) && SANDBOX_ENDED.has(record.sandbox_status);
}

// The status the progress line follows for a record: none while read-only.
function followed(record) {
  return readOnly(record) ? null : executionStatus(record.execution_status);
}

// Whether the run failed (and can be retried here: its sandbox still runs things).
function failed(state) {
  return Boolean(state.record) && !readOnly(state.record) && state.progress === EXECUTION.ERROR;
}

// Whether the agent waits for this person's answer (and the page can take it).
function asking(state) {
  return Boolean(state.record) && !readOnly(state.record)
    && executionStatus(state.record.execution_status) === EXECUTION.WAITING_FOR_CONFIRMATION;
}

export function update(state, action) {
  switch (action.type) {
    case "found": // {record, sandbox}: the conversation and its sandbox as just read (sandbox null: unread)
    case "renamed": // {record}: as its rename saved it
    {
      const progress = followed(action.record);
      const sandbox = action.type === "found" ? action.sandbox : state.sandbox;
      return { ...state, record: action.record, sandbox, progress,
        since: progress === state.progress ? state.since : null, answered: false };
    }
    case "missing":
      return state.missing ? state : { ...state, missing: true };
    case "event": { // {event}: a stored event of the live stream
      const { event } = action;
      if (event.kind !== EVENT.STATE_UPDATE || event.key !== STATE_KEY.EXECUTION_STATUS) return state;
      const progress = executionStatus(event.value);
      const since = progress === state.progress ? state.since : action.at ?? null;
      if (!state.record || readOnly(state.record)) return { ...state, progress, since };
      // The live status is newer than the record read before it.
      const record = { ...state.record, execution_status: event.value };
      return { ...state, record, progress, since, answered: false };
    }
    case "sent": // {at}: a message went: the agent works on it, from now
      return { ...state, progress: EXECUTION.RUNNING, since: action.at };
    case "answered":
      return { ...state, answered: true };
    case "live": // {words}: the live stream's state
      return state.live === action.words ? state : { ...state, live: action.words };
    case "ask-delete":
      return { ...state, deleting: true };
    case "keep":
      return { ...state, deleting: false };
    default:
      return state;
  }
}

export function conversationPage(main, id) {
  let stopped = false;

  const heading = titleEditor(id, (saved) => page.dispatch({ type: "renamed", record: saved }));
  const meta = h("dl", { class: "meta" });
  const banner = h("p", { class: "banner", role: "alert", hidden: true });
  // What the agent asks to do, repeated here (the actions themselves are marked above, in the
  // transcript: "Show it" scrolls there).
  const asked = h("ul", { class: "asked", "aria-label": "Actions waiting for your approval" });
  const confirmation = h("section", { class: "confirm card", hidden: true, "aria-labelledby": "confirm-title" },
    h("h2", { id: "confirm-title" }, "Waiting for your approval"),
    h("p", {}, "The agent asks to do this. Nothing runs until you answer."),
    asked,
    h("div", { class: "row" },
      h("button", { type: "button", class: "primary", onclick: () => answer(true) }, "Approve"),
      h("button", { type: "button", class: "danger", onclick: () => answer(false) }, "Reject")));
  const list = h("ol", { class: "events", "aria-label": "Events", "aria-live": "polite" });
  const log = new EventLog(list);
  const liveState = h("span", { class: "muted", "aria-live": "polite" }, initialState.live);

  const pauseButton = h("button", { type: "button", onclick: () => control("pause", "Pause asked: the agent stops after its current step.") }, "Pause");
  // Stop sits beside the message box, in view whatever the transcript's scroll, while the agent
  // works: it interrupts the run (a running command is stopped with it).
  const stopButton = h("button", { type: "button", class: "danger stop", hidden: true,
    title: "Stop the agent now (a running command is interrupted)",
    onclick: () => control("interrupt", "Stopped: the run was interrupted.") }, "Stop");
  const confirmBox = h("input", { type: "checkbox", name: "confirm-actions" });
  confirmBox.addEventListener("change", async () => {
    const kind = confirmBox.checked ? CONFIRMATION.ALWAYS : CONFIRMATION.NEVER;
    try {
      await api(`/app-conversations/${id}/confirmation-policy`, { method: "POST", body: { policy: { kind } } });
      notify(confirmBox.checked ? "Every action now waits for your approval." : "Actions run without approval.");
    } catch (error) {
      confirmBox.checked = !confirmBox.checked;
      notify(`Could not change it: ${error.message}`, "error");
    }
  });
  const downloadButton = h("button", { type: "button", onclick: async () => {
    try {
      notify(`Downloaded ${await download(`/app-conversations/${id}/download`, `conversation-${id}.zip`)}`);
    } catch (error) {
      notify(`Could not download: ${error.message}`, "error");
    }
  } }, "Download trajectory");

  const message = h("textarea", { name: "follow-up", rows: 2, required: true,
    placeholder: "Message the agent (Enter sends, Shift+Enter for a new line)" });
  const sendButton = h("button", { type: "submit" }, "Send");
  const followUp = h("form", { class: "composer", "aria-label": "Send a message" },
    field("Message", message), sendButton, stopButton);
  message.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      if (message.value.trim() && !sendButton.disabled) followUp.requestSubmit();
    }
  });
  followUp.addEventListener("submit", async (event) => {
    event.preventDefault();
    sendButton.disabled = true;
    try {
      await api(`/app-conversations/${id}/send-message`, { method: "POST",
        body: { role: "user", content: [{ type: "text", text: message.value }], run: true } });
      message.value = "";
      notify("Message sent.");
      newest.stick();
      page.dispatch({ type: "sent", at: Date.now() });
      refresh();
    } catch (error) {
      notify(`Could not send: ${error.message}`, "error");
    } finally {
      sendButton.disabled = readOnly(page.state.record);
    }
  });

  // Delete this conversation (and its events); asks once, in place.
  const deleteButton = h("button", { type: "button", class: "danger-outline", onclick: () => {
    page.dispatch({ type: "ask-delete" });
    deleteConfirm.querySelector("button")?.focus();
  } }, "Delete conversation");
  const deleteConfirm = h("div", { class: "banner row delete-confirm", role: "group", "aria-label": "Delete this conversation?", hidden: true },
    h("span", {}, "Delete this conversation and its events? Its sandbox stays while it holds other conversations."),
    h("button", { type: "button", class: "danger", onclick: () => remove() }, "Delete"),
    h("button", { type: "button", onclick: () => page.dispatch({ type: "keep" }) }, "Cancel"));

  async function remove() {
    try {
      const gone = await api(`/app-conversations/${id}`, { method: "DELETE" });
      notify(`Conversation deleted${gone.sandbox_deleted ? ", with its sandbox (it held no other conversation)" : ""}.`,
        "info", { keep: true });
      location.hash = "#/conversations";
    } catch (error) {
      notify(`Could not delete: ${error.message}`, "error");
    }
  }

  // A failed run goes on in place with the model settings as they are now (POST …/llm: the
  // conversation's model becomes the settings', the run starts again, its events kept): offered
  // in the failed run's error entry, with the way to Settings to fix them first.
  const retryButton = h("button", { type: "button", class: "primary", onclick: () => retry() },
    "Retry with the current settings");
  const retryBox = h("div", { class: "row retry", role: "group", "aria-label": "Retry the failed run", hidden: true },
    retryButton, h("a", { href: "#/settings" }, "Change the model settings"));

  async function retry() {
    retryButton.disabled = true;
    try {
      await api(`/app-conversations/${id}/llm`, { method: "POST", body: { run: true } });
      notify("Retrying with your current model settings.");
      newest.stick();
      page.dispatch({ type: "sent", at: Date.now() });
      refresh();
    } catch (error) {
      notify(`Could not retry: ${error.message}`, "error");
    } finally {
      retryButton.disabled = false;
    }
  }

  // The retry sits in the latest error entry (above the message box when none says why).
  function placeRetry(state) {
    retryBox.hidden = !failed(state);
    if (retryBox.hidden) return;
    const where = log.failure || dock;
    if (retryBox.parentElement === where) return;
    if (where === dock) dock.prepend(retryBox);
    else where.append(retryBox);
  }

  const workspace = workspacePanel(id, log);
  const { panel: work, buttons: workButtons } = workspace;
  const progress = new Progress(log);

  async function control(action, done) {
    try {
      await api(`/app-conversations/${id}/${action}`, { method: "POST" });
      notify(done);
      refresh();
    } catch (error) {
      notify(`Could not ${action}: ${error.message}`, "error");
    }
  }

  async function answer(accept) {
    try {
      await api(`/app-conversations/${id}/respond-to-confirmation`, { method: "POST", body: { accept } });
      notify(accept ? "Approved: the actions run." : "Rejected.");
      page.dispatch({ type: "answered" });
      refresh();
    } catch (error) {
      notify(`Could not answer: ${error.message}`, "error");
    }
  }

  // The header (title, what it runs in, its statuses), the read-only banner and the controls.
  function showRecord(state) {
    const { record: r, sandbox } = state;
    const known = sandbox && sandbox.id === r.sandbox_id && sandbox.status === r.sandbox_status;
    const why = known ? reasonText(sandbox.status, sandbox.status_reason, sandbox.status_detail) : null;
    const ended = readOnly(r);
    log.workingDir = r.working_dir || null;
    workspace.sandbox(r.sandbox_id);
    heading.set(r.title || `Conversation ${r.id.slice(0, 8)}`);
    document.title = `${r.title || `Conversation ${r.id.slice(0, 8)}`} · Agent console`;
    clear(meta);
    const pairs = [
      ["Repository", r.selected_repository ? `${r.selected_repository}${r.selected_branch ? ` @ ${r.selected_branch}` : ""}` : "—"],
      ["Sandbox", h("a", { href: "#/sandboxes" },
        sandbox && sandbox.id === r.sandbox_id && sandbox.name ? sandbox.name : `${r.sandbox_id.slice(0, 8)}…`)],
      ["Sandbox status", [badge(r.sandbox_status, "Sandbox", sandboxWord(r.sandbox_status)),
        why ? h("span", { class: "why-line" }, ` ${why}`) : null]],
      ["Execution", badge(executionStatus(r.execution_status), "Execution", executionWord(r.execution_status))],
      ["Cost", cost(r.metrics?.accumulated_cost)],
      ["Live events", liveState],
    ];
    for (const [term, value] of pairs) meta.append(h("div", {}, h("dt", {}, term), h("dd", {}, value)));
    banner.hidden = !ended;
    banner.textContent = ended
      ? `Read-only: the sandbox is ${String(sandboxWord(r.sandbox_status)).toLowerCase()}${why ? ` (${why})` : ""}. The transcript stays; messages, controls and the workspace are not available.`
      : "";
    for (const control of [pauseButton, stopButton, confirmBox, sendButton, message, ...workButtons]) {
      control.disabled = ended;
    }
    for (const entry of log.pending()) entry.classList.toggle("waiting", asking(state));
  }

  function render(state, previous) {
    if (state.missing) {
      if (!previous.missing) {
        clear(main).append(h("h1", {}, "Not found"), h("p", {}, "This conversation does not exist (or is not yours)."));
      }
      return;
    }
    if (state.record && (state.record !== previous.record || state.sandbox !== previous.sandbox)) {
      showRecord(state);
    }
    confirmation.hidden = state.answered || !asking(state);
    if (!confirmation.hidden) showAsked();
    stopButton.hidden = readOnly(state.record) ||
      (state.progress !== EXECUTION.RUNNING && state.progress !== EXECUTION.WAITING_FOR_CONFIRMATION);
    progress.setStatus(state.progress, state.since);
    if (state.live !== previous.live) liveState.textContent = state.live;
    deleteConfirm.hidden = !state.deleting;
    placeRetry(state);
  }

  // The actions waiting, as the card repeats them: what each is and its command.
  function showAsked() {
    clear(asked);
    for (const entry of log.pending()) {
      const call = entry.querySelector(".call, .diff, .preview")?.textContent;
      asked.append(h("li", {},
        h("strong", {}, entry.getAttribute("aria-label") || "An action"),
        call ? h("pre", { class: "call", tabindex: "0" }, call) : null,
        h("button", { type: "button", class: "link", onclick: () => {
          entry.scrollIntoView({ block: "center" });
          entry.focus({ preventScroll: true });
        } }, "Show it in the transcript")));
    }
  }

  const page = createStore(initialState, update, render);

  async function refresh() {
    try {
      const [found] = await api("/app-conversations", { query: { ids: id } });
      if (stopped) return;
      if (!found) {
        page.dispatch({ type: "missing" });
        return;
      }
      // Both read before either is drawn: the sandbox's reason adds lines above the controls, and
      // drawing it a moment after the record moved the buttons under a person's click.
      let sandbox;
      try {
        [sandbox] = await api("/sandboxes", { query: { id: found.sandbox_id } });
      } catch {
        sandbox = null; // the status without its reason
      }
      if (stopped) return;
      page.dispatch({ type: "found", record: found, sandbox: sandbox ?? null });
    } catch (error) {
      notify(`Could not read the conversation: ${error.message}`, "error");
    }
  }

  const dock = h("div", { class: "dock" }, confirmation, progress.element, followUp);
  main.append(heading.element, meta, banner,
    h("div", { class: "row toolbar", role: "group", "aria-label": "Controls" },
      pauseButton,
      h("label", { class: "check" }, confirmBox, " Ask before each action"),
      downloadButton, deleteButton),
    deleteConfirm,
    // The chat, and the workspace panel beside it (above it on a narrow window).
    h("div", { class: "with-panel" },
      h("div", { class: "chat" },
        h("section", { class: "transcript", "aria-labelledby": "events-title" },
          h("h2", { id: "events-title", class: "visually-hidden" }, "Events"), list),
        dock),
      work));
  const newest = followNewest([list, dock]);

  // An event of the live stream: into the transcript, and into the page's state as an action.
  let pending = null;
  function receive(event) {
    log.add(event);
    workspace.event(event);
    page.dispatch({ type: "event", event, at: log.lastAt });
    placeRetry(page.state); // (an error entry drawn after the record said the run failed)
    if (event.kind === EVENT.STATE_UPDATE || event.kind === EVENT.ACTION) {
      clearTimeout(pending);
      pending = setTimeout(refresh, 150); // a burst of updates: one read
    }
    progress.render();
  }

  let stop = () => {};
  const listen = () => follow(id, {
    onEvent: receive,
    onDelta: (delta) => { log.stream(delta); workspace.delta(delta); progress.render(); },
    onState: (words) => page.dispatch({ type: "live", words }),
    onGone: () => page.dispatch({ type: "live", words: "the conversation was deleted" }),
  });
  // The record first: its working directory shortens the paths in the events.
  refresh().finally(() => { if (!stopped) stop = listen(); });
  const timer = setInterval(refresh, 5000);
  return () => {
    stopped = true;
    stop();
    progress.stop();
    clearInterval(timer);
    clearTimeout(pending);
    newest.stop();
  };
}
