// One conversation: its events live, a follow-up, pause, interrupt, confirmation, the
// workspace's Git changes and a file's diff, the trajectory. Read-only once its sandbox is
// ERROR or MISSING (SPEC 3.1).
import { api, download, follow } from "./api.js";
import { badge, clear, cost, field, h, notify } from "./dom.js";
import { EventLog } from "./events.js";
import { execution, reasonText } from "./status.js";
import { lineDiff } from "./diff.js";

const READ_ONLY = new Set(["ERROR", "MISSING"]);

export function conversationPage(main, id) {
  let record = null;
  let sandbox = null; // its sandbox's record: why it is in its status
  let stopped = false;

  const heading = h("h1", {}, "Conversation");
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

  const message = h("textarea", { name: "follow-up", rows: 3, required: true });
  const sendButton = h("button", { type: "submit" }, "Send");
  const followUp = h("form", { class: "card", "aria-labelledby": "follow-title" },
    h("h2", { id: "follow-title" }, "Send a message"), field("Message", message), sendButton);
  followUp.addEventListener("submit", async (event) => {
    event.preventDefault();
    sendButton.disabled = true;
    try {
      await api(`/app-conversations/${id}/send-message`, { method: "POST",
        body: { role: "user", content: [{ type: "text", text: message.value }], run: true } });
      message.value = "";
      notify("Message sent.");
      refresh();
    } catch (error) {
      notify(`Could not send: ${error.message}`, "error");
    } finally {
      sendButton.disabled = false;
    }
  });

  const changes = h("ul", { class: "changes", "aria-label": "Changed files" });
  const diffTitle = h("h3", { id: "diff-title" }, "Diff");
  const diffView = h("pre", { class: "diff", "aria-labelledby": "diff-title", tabindex: "0" });
  const changesButton = h("button", { type: "button", onclick: () => loadChanges() }, "Show Git changes");
  const work = h("section", { class: "card", "aria-labelledby": "work-title" },
    h("h2", { id: "work-title" }, "Workspace"), changesButton, changes, diffTitle, diffView);
  diffTitle.hidden = diffView.hidden = true;

  async function loadChanges() {
    try {
      const found = await api(`/app-conversations/${id}/git/changes`);
      clear(changes);
      if (!found.length) changes.append(h("li", { class: "muted" }, "No changes."));
      for (const change of found) {
        changes.append(h("li", {},
          h("button", { type: "button", class: "link", onclick: () => showDiff(change.path) }, change.path),
          " ", badge(change.status)));
      }
    } catch (error) {
      notify(`Could not read the changes: ${error.message}`, "error");
    }
  }

  async function showDiff(path) {
    try {
      const diff = await api(`/app-conversations/${id}/git/diff`, { query: { path } });
      clear(diffView);
      diffTitle.textContent = `Diff of ${diff.path}`;
      for (const [sign, line] of lineDiff(diff.original, diff.modified)) {
        diffView.append(h("span", { class: sign === "+" ? "add" : sign === "-" ? "del" : "same" }, `${sign} ${line}\n`));
      }
      diffTitle.hidden = diffView.hidden = false;
    } catch (error) {
      notify(`Could not read the diff: ${error.message}`, "error");
    }
  }

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
    heading.textContent = r.title || `Conversation ${r.id.slice(0, 8)}`;
    document.title = `${heading.textContent} · Agent console`;
    clear(meta);
    const pairs = [
      ["Repository", r.selected_repository ? `${r.selected_repository}${r.selected_branch ? ` @ ${r.selected_branch}` : ""}` : "—"],
      ["Sandbox", h("a", { href: "#/sandboxes" }, h("code", {}, r.sandbox_id))],
      ["Sandbox status", [badge(r.sandbox_status, "Sandbox"), why ? h("span", { class: "why-line" }, ` ${why}`) : null]],
      ["Execution", badge(execution(r), "Execution")],
      ["Cost", cost(r.metrics?.accumulated_cost)],
      ["Live events", liveState],
    ];
    for (const [term, value] of pairs) meta.append(h("div", {}, h("dt", {}, term), h("dd", {}, value)));
    const readOnly = READ_ONLY.has(r.sandbox_status);
    banner.hidden = !readOnly;
    banner.textContent = readOnly
      ? `Read-only: the sandbox is ${r.sandbox_status}${why ? ` (${why})` : ""}. The transcript stays; messages, controls and the workspace are not available.`
      : "";
    for (const control of [pauseButton, interruptButton, confirmBox, sendButton, message, changesButton]) {
      control.disabled = readOnly;
    }
    confirmation.hidden = readOnly || execution(r) !== "WAITING_FOR_CONFIRMATION";
    for (const entry of log.pending()) entry.classList.toggle("waiting", !confirmation.hidden);
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

  main.append(heading, meta, banner,
    h("div", { class: "row toolbar", role: "group", "aria-label": "Controls" },
      pauseButton, interruptButton,
      h("label", { class: "check" }, confirmBox, " Ask before each action"),
      downloadButton),
    confirmation,
    h("section", { "aria-labelledby": "events-title" }, h("h2", { id: "events-title" }, "Events"), list),
    followUp, work);

  let pending = null;
  const stop = follow(id, {
    onEvent: (event) => {
      log.add(event);
      if (event.kind === "ConversationStateUpdateEvent" || event.kind === "ActionEvent") {
        clearTimeout(pending);
        pending = setTimeout(refresh, 150); // a burst of updates: one read
      }
    },
    onDelta: (delta) => log.stream(delta),
    onState: (state) => { liveState.textContent = state; },
    onGone: () => { liveState.textContent = "the conversation was deleted"; },
  });
  refresh();
  const timer = setInterval(refresh, 5000);
  return () => { stopped = true; stop(); clearInterval(timer); clearTimeout(pending); };
}
