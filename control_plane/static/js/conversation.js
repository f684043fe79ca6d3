// One conversation as a chat: its events live (the page follows the newest unless you scroll
// up), the message box pinned at the bottom (Enter sends, Shift+Enter a new line), a progress
// line while the agent works, the title renamed in place, pause, interrupt, confirmation,
// delete, the workspace and the trajectory. Read-only once its sandbox is ERROR or MISSING
// (SPEC 3.1).
import { api, download, follow } from "./api.js";
import { badge, clear, cost, field, h, notify } from "./dom.js";
import { EventLog } from "./events.js";
import { reasonText } from "./status.js";
import { Progress, normalStatus } from "./progress.js";
import { workspacePanel } from "./workspace.js";
import { titleEditor } from "./title.js";

const READ_ONLY = new Set(["ERROR", "MISSING"]);

export function conversationPage(main, id) {
  let record = null;
  let sandbox = null; // its sandbox's record: why it is in its status
  let stopped = false;

  const heading = titleEditor(id, (saved) => { record = saved; show(); });
  let readOnly = false;
  let stick = true; // the page follows the newest event until you scroll up
  const meta = h("dl", { class: "meta" });
  const banner = h("p", { class: "banner", role: "alert", hidden: true });
  const confirmation = h("section", { class: "confirm card", hidden: true, "aria-labelledby": "confirm-title" },
    h("h2", { id: "confirm-title" }, "Waiting for your approval"),
    h("p", {}, "The agent wants to run the action(s) marked below. Nothing runs until you answer."),
    h("div", { class: "row" },
      h("button", { type: "button", class: "primary", onclick: () => answer(true) }, "Approve"),
      h("button", { type: "button", class: "danger", onclick: () => answer(false) }, "Reject")));
  const list = h("ol", { class: "events", "aria-label": "Events", "aria-live": "polite" });
  const log = new EventLog(list);
  const liveState = h("span", { class: "muted", "aria-live": "polite" }, "connecting…");

  const pauseButton = h("button", { type: "button", onclick: () => control("pause", "Pause asked: the agent stops after its current step.") }, "Pause");
  const interruptButton = h("button", { type: "button", onclick: () => control("interrupt", "Interrupted.") }, "Interrupt");
  const confirmBox = h("input", { type: "checkbox", name: "confirm-actions" });
  confirmBox.addEventListener("change", async () => {
    const kind = confirmBox.checked ? "AlwaysConfirm" : "NeverConfirm";
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
    field("Message", message), sendButton);
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
      stick = true;
      progress.setStatus("RUNNING");
      refresh();
    } catch (error) {
      notify(`Could not send: ${error.message}`, "error");
    } finally {
      sendButton.disabled = readOnly;
    }
  });

  // Delete this conversation (and its events); asks once, in place.
  const deleteButton = h("button", { type: "button", class: "danger-outline", onclick: () => {
    deleteConfirm.hidden = false;
    deleteConfirm.querySelector("button")?.focus();
  } }, "Delete conversation");
  const deleteConfirm = h("div", { class: "banner row delete-confirm", role: "group", "aria-label": "Delete this conversation?", hidden: true },
    h("span", {}, "Delete this conversation and its events? Its sandbox stays while it holds other conversations."),
    h("button", { type: "button", class: "danger", onclick: () => remove() }, "Delete"),
    h("button", { type: "button", onclick: () => { deleteConfirm.hidden = true; } }, "Cancel"));

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

  const { panel: work, buttons: workButtons } = workspacePanel(id, log);
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
      confirmation.hidden = true;
      refresh();
    } catch (error) {
      notify(`Could not answer: ${error.message}`, "error");
    }
  }

  function show() {
    const r = record;
    const known = sandbox && sandbox.id === r.sandbox_id && sandbox.status === r.sandbox_status;
    const why = known ? reasonText(sandbox.status, sandbox.status_reason, sandbox.status_detail) : null;
    const execution = normalStatus(r.execution_status);
    log.workingDir = r.working_dir || null;
    heading.set(r.title || `Conversation ${r.id.slice(0, 8)}`);
    document.title = `${r.title || `Conversation ${r.id.slice(0, 8)}`} · Agent console`;
    clear(meta);
    const pairs = [
      ["Repository", r.selected_repository ? `${r.selected_repository}${r.selected_branch ? ` @ ${r.selected_branch}` : ""}` : "—"],
      ["Sandbox", h("a", { href: "#/sandboxes" }, h("code", {}, r.sandbox_id))],
      ["Sandbox status", [badge(r.sandbox_status, "Sandbox"), why ? h("span", { class: "why-line" }, ` ${why}`) : null]],
      ["Execution", badge(execution, "Execution")],
      ["Cost", cost(r.metrics?.accumulated_cost)],
      ["Live events", liveState],
    ];
    for (const [term, value] of pairs) meta.append(h("div", {}, h("dt", {}, term), h("dd", {}, value)));
    readOnly = READ_ONLY.has(r.sandbox_status);
    banner.hidden = !readOnly;
    banner.textContent = readOnly
      ? `Read-only: the sandbox is ${r.sandbox_status}${why ? ` (${why})` : ""}. The transcript stays; messages, controls and the workspace are not available.`
      : "";
    for (const control of [pauseButton, interruptButton, confirmBox, sendButton, message, ...workButtons]) {
      control.disabled = readOnly;
    }
    confirmation.hidden = readOnly || execution !== "WAITING_FOR_CONFIRMATION";
    for (const entry of log.pending()) entry.classList.toggle("waiting", !confirmation.hidden);
    progress.setStatus(readOnly ? null : execution);
  }

  async function refresh() {
    try {
      const [found] = await api("/app-conversations", { query: { ids: id } });
      if (stopped) return;
      if (!found) {
        clear(main).append(h("h1", {}, "Not found"), h("p", {}, "This conversation does not exist (or is not yours)."));
        return;
      }
      record = found;
      try {
        [sandbox] = await api("/sandboxes", { query: { id: found.sandbox_id } });
      } catch {
        sandbox = null; // the status without its reason
      }
      if (stopped) return;
      show();
    } catch (error) {
      notify(`Could not read the conversation: ${error.message}`, "error");
    }
  }

  const dock = h("div", { class: "dock" }, confirmation, progress.element, followUp);
  main.append(heading.element, meta, banner,
    h("div", { class: "row toolbar", role: "group", "aria-label": "Controls" },
      pauseButton, interruptButton,
      h("label", { class: "check" }, confirmBox, " Ask before each action"),
      downloadButton, deleteButton),
    deleteConfirm, work,
    h("section", { class: "transcript", "aria-labelledby": "events-title" },
      h("h2", { id: "events-title", class: "visually-hidden" }, "Events"), list),
    dock);

  // Following the newest: after each change to the page, back to the bottom unless the reader
  // scrolled up to read (coming back down follows again). Only a move up lets go: the page's own
  // scrolls go down, and content that grew before their scroll event must not read as the reader's.
  const atBottom = () => window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 80;
  let lastY = window.scrollY;
  const onScroll = () => {
    if (atBottom()) stick = true;
    else if (window.scrollY < lastY) stick = false;
    lastY = window.scrollY;
  };
  window.addEventListener("scroll", onScroll, { passive: true });
  let scrolling = false;
  const follow_ = () => {
    if (!stick || scrolling) return;
    scrolling = true;
    requestAnimationFrame(() => {
      scrolling = false;
      window.scrollTo({ top: document.documentElement.scrollHeight });
    });
  };
  const growth = new MutationObserver(follow_);
  for (const part of [list, dock]) growth.observe(part, { childList: true, subtree: true, characterData: true });

  let pending = null;
  let stop = () => {};
  const listen = () => follow(id, {
    onEvent: (event) => {
      log.add(event);
      if (event.kind === "ConversationStateUpdateEvent" && event.key === "execution_status") {
        // The live status is newer than the record read before it.
        if (record && !readOnly) {
          record.execution_status = event.value;
          show();
        } else {
          progress.setStatus(event.value);
        }
      }
      if (event.kind === "ConversationStateUpdateEvent" || event.kind === "ActionEvent") {
        clearTimeout(pending);
        pending = setTimeout(refresh, 150); // a burst of updates: one read
      }
      progress.render();
    },
    onDelta: (delta) => { log.stream(delta); progress.render(); },
    onState: (state) => { liveState.textContent = state; },
    onGone: () => { liveState.textContent = "the conversation was deleted"; },
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
    window.removeEventListener("scroll", onScroll);
  };
}
