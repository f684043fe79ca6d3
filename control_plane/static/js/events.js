// One conversation's events as page elements. Everything an event holds (model text, commands,
// output, file contents) goes in as text; a tool call's result joins the call's own entry. The
// control plane's notices of the sandbox's status (key `sandbox_status`) say why, in words.
import { h, timeElement } from "./dom.js";
import { addToFold, describeAction, describeResult, folded, raw, rawResult, texts } from "./actions.js";
import { extraDetail, statusLine } from "./status.js";
import { errorParts } from "./errors.js";
import {
  ACP_ENDED,
  ACTION,
  EVENT,
  FILE_EDITOR_OBSERVATIONS,
  OBSERVATION,
  SOURCE,
  STATE_KEY,
} from "./schema.js";

// When an event happened (ms), from its timestamp; now when that is unreadable or ahead of
// this browser's clock.
function eventTime(event) {
  const now = Date.now();
  const at = event.timestamp ? Date.parse(event.timestamp) : NaN;
  return Number.isNaN(at) || at > now ? now : at;
}

// When, as "2 min ago" (the full moment in its title).
function stamp(event) {
  return event.timestamp ? timeElement(event.timestamp, "stamp") : null;
}

// "Sandbox · Paused: the 12-hour limit", and the detail when it says more.
function sandboxNotice(event) {
  const value = event.value && typeof event.value === "object" ? event.value : {};
  const line = statusLine(value.status, value.reason, value.detail);
  const more = extraDetail(line, value.detail);
  return h("li", { class: "event event-sandbox", dataset: { sandboxStatus: String(value.status || "") } },
    h("p", { class: "who" }, "Sandbox ", stamp(event)),
    h("p", { class: "text" }, line),
    more ? h("p", { class: "muted" }, more) : null);
}

const LIVE_CHARS = 16_384; // of a running command's output kept on the page
const FOLD_LIVE = 20; // its last lines shown

export class EventLog {
  constructor(list) {
    this.list = list; // an <ol>
    this.seen = new Set();
    this.actions = new Map(); // action event id -> its entry
    this.acp = new Map(); // ACP tool call id -> its entry
    this.edits = new Map(); // path -> {before, after}: the file editor's changes of this run
    this.commands = []; // the terminal's history: {command, exit}
    this.liveOutput = new Map(); // tool call id -> a running command's output so far
    this.retry = null; // {until, why, count}: the model call is retried (count: the retries so far)
    this.failure = null; // the entry of the latest ConversationErrorEvent (a failed run)
    this.lastAt = null; // ms: when the last stored event happened
    this.draft = null; // streamed text not yet a message
  }

  add(event) {
    if (event.kind === EVENT.STREAMING_DELTA) return this.stream(event);
    if (event.id && this.seen.has(event.id)) return;
    if (event.id) this.seen.add(event.id);
    this.lastAt = eventTime(event);
    this.retry = null;
    this.note(event);
    const entry = this.entry(event);
    if (!entry) return;
    if (event.source === SOURCE.AGENT && this.draft) {
      this.draft.remove();
      this.draft = null;
    }
    this.list.append(entry);
  }

  // Streaming text (StreamingDeltaEvents): one entry that grows, as text nodes, until the
  // agent's next stored event (its MessageEvent, or the tool call the text led to) replaces it.
  stream(event) {
    if (event.kind === EVENT.STATE_UPDATE && event.key === STATE_KEY.LLM_RETRY) {
      const wait = Number(event.value?.retry_in) || 0;
      this.retry = { until: Date.now() + wait * 1000, why: String(event.value?.error || "an error"),
        count: (this.retry?.count || 0) + 1 };
      return;
    }
    if (event.tool_call_id && event.output) return this.streamOutput(event);
    if (!event.content && !event.reasoning_content) return;
    if (!this.draft) {
      this.draft = h("li", { class: "event event-streaming", "aria-busy": "true" },
        h("p", { class: "who" }, "Agent (writing…)"),
        h("p", { class: "text thought", hidden: true }), h("p", { class: "text" }));
      this.list.append(this.draft);
    }
    if (event.reasoning_content) {
      const thinking = this.draft.querySelector(".thought");
      thinking.hidden = false;
      thinking.append(event.reasoning_content);
    }
    if (event.content) this.draft.querySelector(".text:not(.thought)").append(event.content);
  }

  // A file's path as the user knows it: relative to the conversation's working directory.
  // The same way everywhere: inside the workspace relative to it (its root "."), outside it
  // absolute.
  relPath(path) {
    const dir = this.workingDir ? this.workingDir.replace(/\/+$/, "") : null;
    if (!dir) return path;
    if (path === dir) return ".";
    return path.startsWith(`${dir}/`) ? path.slice(dir.length + 1) : path;
  }

  // What the workspace panel lists: the files edited (first and last content) and commands.
  note(event) {
    const observation = event.kind === EVENT.OBSERVATION ? event.observation || {} : null;
    if (!observation) return;
    if (observation.kind === OBSERVATION.TERMINAL && observation.command) {
      this.commands.push({ command: observation.command, exit: observation.exit_code ?? null });
      this.liveOutput.delete(event.tool_call_id);
    }
    if (FILE_EDITOR_OBSERVATIONS.has(observation.kind) &&
        observation.command !== "view" && !observation.is_error && observation.path &&
        observation.new_content !== null && observation.new_content !== undefined) {
      const path = observation.path;
      const before = this.edits.has(path) ? this.edits.get(path).before
        : observation.prev_exist ? observation.old_content ?? "" : null;
      this.edits.set(path, { before, after: observation.new_content });
    }
  }

  // A running command's output so far (deltas with `tool_call_id` and `output`, live only):
  // kept, bounded, until its observation brings the whole.
  streamOutput(event) {
    const entry = [...this.actions.values()].find((e) => e.dataset.callId === event.tool_call_id);
    if (entry?.dataset.done) return;
    const soFar = ((this.liveOutput.get(event.tool_call_id) || "") + event.output).slice(-LIVE_CHARS);
    this.liveOutput.set(event.tool_call_id, soFar);
    if (entry) this.showLive(entry);
  }

  // The output so far in a running call's entry (the deltas may come before the call's event).
  showLive(entry) {
    const soFar = this.liveOutput.get(entry.dataset.callId);
    const state = entry.querySelector(".result-state");
    if (!soFar || !state) return;
    state.textContent = "Running; its output so far:";
    let live = entry.querySelector(".live-output");
    if (!live) {
      live = h("pre", { class: "output live-output", tabindex: "0" });
      state.after(live);
    }
    live.textContent = soFar.split("\n").slice(-FOLD_LIVE).join("\n");
  }

  // The actions still without a result (waiting for confirmation, or running).
  pending() {
    return [...this.actions.values()].filter((entry) => !entry.dataset.done);
  }

  entry(event) {
    switch (event.kind) {
      case EVENT.MESSAGE: {
        const who = event.source === SOURCE.USER ? "You" : event.source === SOURCE.AGENT ? "Agent" : event.source;
        return h("li", { class: `event event-message from-${event.source}` },
          h("p", { class: "who" }, who, " ", stamp(event)),
          h("p", { class: "text" }, texts(event.llm_message?.content)));
      }
      case EVENT.ACTION: {
        const thought = texts(event.thought) || event.summary;
        if (event.action?.kind === ACTION.FINISH) {
          // The agent's answer: a message, not a tool call.
          const entry = h("li", { class: "event event-message from-agent finish", dataset: { actionId: event.id } },
            h("p", { class: "who" }, "Agent ", stamp(event)),
            thought ? h("p", { class: "text thought" }, thought) : null,
            h("p", { class: "text" }, event.action.message ?? ""));
          entry.dataset.done = "1";
          this.actions.set(event.id, entry);
          return entry;
        }
        const [title, body] = describeAction(event, (path) => this.relPath(String(path || "")));
        const entry = h("li", { class: "event event-action", dataset: { actionId: event.id, callId: event.tool_call_id, tool: event.tool_name, at: String(this.lastAt) },
          "aria-label": title, tabindex: "-1" },
          h("p", { class: "who" }, h("strong", { class: "what" }, title), " ", stamp(event)),
          thought ? h("p", { class: "text thought" }, thought) : null,
          body,
          h("p", { class: "result-state muted" }, "waiting for its result…"),
          raw(event));
        this.actions.set(event.id, entry);
        this.showLive(entry);
        return entry;
      }
      case EVENT.OBSERVATION:
      case EVENT.AGENT_ERROR:
      case EVENT.USER_REJECT: {
        const target = this.actions.get(event.action_id) ||
          [...this.actions.values()].find((e) => e.dataset.callId === event.tool_call_id);
        const [result, more] = describeResult(event);
        if (target) {
          target.querySelector(".result-state")?.remove();
          target.querySelector(".live-output")?.remove();
          target.dataset.done = "1";
          // The agent's answer (a finish) has no fold: its result adds nothing to it.
          const fold = target.querySelector("details.raw");
          if (fold) {
            if (result) fold.before(result);
            addToFold(fold, [more, rawResult(event)]);
          } else if (result) {
            target.append(result);
          }
          return null;
        }
        if (!result && !more) return null;
        const fold = raw(event, "The result as received");
        if (more) fold.querySelector("summary").after(...more);
        return h("li", { class: "event event-result" }, result, fold);
      }
      case EVENT.ACP_TOOL_CALL: {
        // One entry per call, updated as its status changes.
        const shown = this.acp.get(event.tool_call_id);
        const entry = h("li", { class: `event event-action${event.is_error ? " failed" : ""}`, dataset: { callId: event.tool_call_id, tool: event.tool_kind || "acp" } },
          h("p", { class: "who" }, h("strong", { class: "what" }, event.title || "Tool call"), " ",
            h("span", { class: "muted" }, event.status || ""), " ", stamp(event)),
          event.raw_input ? h("pre", { class: "call" }, typeof event.raw_input === "string" ? event.raw_input : JSON.stringify(event.raw_input, null, 2)) : null,
          event.raw_output ? folded(typeof event.raw_output === "string" ? event.raw_output : JSON.stringify(event.raw_output, null, 2)) : null,
          raw(event));
        if (ACP_ENDED.has(event.status)) entry.dataset.done = "1";
        this.acp.set(event.tool_call_id, entry);
        if (shown) {
          shown.replaceWith(entry);
          return null;
        }
        return entry;
      }
      case EVENT.CONVERSATION_ERROR:
      case EVENT.SERVER_ERROR: {
        const entry = h("li", { class: "event event-error", role: "note" },
          h("p", { class: "who" }, "Error ", h("code", {}, event.code), " ", stamp(event)),
          errorParts(event.detail));
        if (event.kind === EVENT.CONVERSATION_ERROR) this.failure = entry; // where a retry is offered
        return entry;
      }
      case EVENT.STATE_UPDATE:
        // The execution status is the header's and the progress line's, not an entry between
        // turns; a change of the sandbox's status is one, where it happened, and so is a change
        // of the model (a retry with the current settings, the agent's own switch).
        if (event.key === STATE_KEY.LLM && event.value && typeof event.value === "object") {
          return h("li", { class: "event event-state event-llm" },
            "The model is now ", h("code", {}, String(event.value.model ?? "")), " ", stamp(event));
        }
        return event.key === STATE_KEY.SANDBOX_STATUS ? sandboxNotice(event) : null;
      case EVENT.PAUSE:
        return h("li", { class: "event event-state" }, "Paused by the user ", stamp(event));
      case EVENT.INTERRUPT:
        return h("li", { class: "event event-state" }, "Interrupted by the user ", stamp(event));
      case EVENT.SYSTEM_PROMPT:
        return h("li", { class: "event event-system" },
          h("details", {}, h("summary", {}, `System prompt and ${(event.tools || []).length} tools`),
            h("pre", { class: "output", tabindex: "0" }, event.system_prompt?.text || "")));
      case EVENT.CONDENSATION:
      case EVENT.CONDENSATION_SUMMARY:
        return h("li", { class: "event event-state" }, "The history was condensed ", stamp(event));
      case EVENT.HOOK_EXECUTION:
        return h("li", { class: "event event-state" },
          `Hook ${event.hook_event_type}: `, h("code", {}, event.hook_command),
          event.blocked ? " (blocked)" : event.success ? "" : " (failed)");
      case EVENT.LLM_COMPLETION_LOG:
      case EVENT.TOKEN:
      case EVENT.CONDENSATION_REQUEST:
        return null;
      default:
        return h("li", { class: "event event-state" }, event.kind || "event", " ", stamp(event));
    }
  }
}
