// The line above the message box that says what the agent is doing while it works, and for how
// long: calling the model, the model writing, running a command (its output so far shows in
// the command's own entry), waiting for your approval. Redrawn each second from the event log's state.
import { h } from "./dom.js";
import { EXECUTION, TERMINAL_TOOL, executionStatus } from "./schema.js";

// How long a model call may go unanswered before the line says it may be being retried.
const QUIET_MS = 10_000;

export function elapsed(ms) {
  const seconds = Math.max(0, Math.floor(ms / 1000));
  if (seconds < 60) return `${seconds} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min ${String(seconds % 60).padStart(2, "0")} s`;
  return `${Math.floor(minutes / 60)} h ${String(minutes % 60).padStart(2, "0")} min`;
}

// The line's own state: the execution status it was last given (in the wire's case) and since
// when the agent has been working; what it says is read from the event log at each redraw.
export class Progress {
  constructor(log) {
    this.log = log;
    this.status = null;
    this.workingSince = null;
    this.what = h("span", { class: "what" });
    this.time = h("span", { class: "elapsed" });
    this.element = h("div", { class: "progress-line", role: "status", "aria-live": "off", hidden: true },
      h("span", { class: "spinner", "aria-hidden": "true" }), this.what, " ", this.time);
    this.timer = setInterval(() => this.render(), 1000);
  }

  // `since` (ms): when the status began (a message sent, the event that said it), when known;
  // a run's time counts from it, never from the conversation's previous run.
  setStatus(value, since = null) {
    const status = executionStatus(value);
    if (status === this.status) return;
    // A run starts (not a run going on after an approval): its time counts from then.
    if (status === EXECUTION.RUNNING && this.status !== EXECUTION.WAITING_FOR_CONFIRMATION) {
      this.workingSince = since || Date.now();
    }
    this.status = status;
    this.render();
  }

  stop() {
    clearInterval(this.timer);
  }

  render() {
    const now = Date.now();
    const busy =
      this.status === EXECUTION.RUNNING || this.status === EXECUTION.WAITING_FOR_CONFIRMATION;
    this.element.hidden = !busy;
    if (!busy) return;
    let what;
    let since;
    const pending = this.log.pending();
    if (this.status === EXECUTION.WAITING_FOR_CONFIRMATION) {
      // Counted from the request: the action that waits (its own event's time).
      what = "Waiting for your approval";
      const asked = pending.map((entry) => Number(entry.dataset.at)).filter(Boolean);
      since = asked.length ? Math.max(...asked) : this.log.lastAt;
      this.what.textContent = what;
      this.time.textContent = elapsed(now - (since || now));
      return;
    } else if (pending.length) {
      const entry = pending[pending.length - 1];
      const title = entry.getAttribute("aria-label") || "a tool";
      what = entry.dataset.tool === TERMINAL_TOOL
        ? `Running a command: ${entry.querySelector(".call")?.textContent || ""}`
        : `Running: ${title}`;
      since = Number(entry.dataset.at) || this.log.lastAt;
    } else if (this.log.draft) {
      what = "The model is writing";
      since = this.log.lastAt;
    } else if (this.log.retry && this.log.retry.until > now) {
      const { why, until, count } = this.log.retry;
      what = `The model call failed (${why}): retrying in ${Math.ceil((until - now) / 1000)} s`
        + (count > 1 ? ` (retry ${count})` : "");
      since = this.log.lastAt;
    } else if (this.log.retry) {
      // The wait is over: the call is being made again, its time counted from then.
      const { why, until, count } = this.log.retry;
      what = `Retrying the model call (retry ${count}; the last try failed: ${why})`;
      since = until;
    } else {
      since = this.log.lastAt;
      // The agent server says a call is retried only to a page that was following then: a
      // long wait without an answer is most likely that.
      what = since && now - since > QUIET_MS
        ? "Calling the model: no answer yet (a failed call is retried before the run stops)"
        : "Calling the model";
    }
    this.what.textContent = what;
    const total = this.workingSince ? ` · working for ${elapsed(now - this.workingSince)}` : "";
    this.time.textContent = `${elapsed(now - (since || now))}${total}`;
  }
}
