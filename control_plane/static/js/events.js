// One conversation's events as page elements. Everything an event holds (model text, commands,
// output, file contents) goes in as text; a tool call's result joins the call's own entry. The
// control plane's notices of the sandbox's status (key `sandbox_status`) say why, in words.
import { h, when } from "./dom.js";
import { extraDetail, statusLine } from "./status.js";

function texts(content) {
  return (content || []).filter((c) => c && c.type === "text").map((c) => c.text).join("\n");
}

function actionText(event) {
  const action = event.action || {};
  if (typeof action.command === "string" && event.tool_name === "terminal") return `$ ${action.command}`;
  const { kind, ...rest } = action;
  const shown = Object.keys(rest).length ? rest : event.tool_call?.arguments;
  return typeof shown === "string" ? shown : JSON.stringify(shown ?? {}, null, 2);
}

function stamp(event) {
  return event.timestamp ? h("time", { datetime: event.timestamp, class: "stamp" }, when(event.timestamp)) : null;
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

export class EventLog {
  constructor(list) {
    this.list = list; // an <ol>
    this.seen = new Set();
    this.actions = new Map(); // action event id -> its entry
    this.draft = null; // streamed text not yet a message
    this.lastStatus = null;
  }

  add(event) {
    if (event.kind === "StreamingDeltaEvent") return this.stream(event);
    if (event.id && this.seen.has(event.id)) return;
    if (event.id) this.seen.add(event.id);
    const entry = this.entry(event);
    if (!entry) return;
    if (event.source === "agent" && this.draft) {
      this.draft.remove();
      this.draft = null;
    }
    this.list.append(entry);
  }

  // Streaming text (StreamingDeltaEvents): one entry that grows, as text nodes, until the
  // agent's next stored event (its MessageEvent, or the tool call the text led to) replaces it.
  stream(event) {
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

  // The actions still without a result (waiting for confirmation, or running).
  pending() {
    return [...this.actions.values()].filter((entry) => !entry.dataset.done);
  }

  entry(event) {
    switch (event.kind) {
      case "MessageEvent": {
        const who = event.source === "user" ? "You" : event.source === "agent" ? "Agent" : event.source;
        return h("li", { class: `event event-message from-${event.source}` },
          h("p", { class: "who" }, who, " ", stamp(event)),
          h("p", { class: "text" }, texts(event.llm_message?.content)));
      }
      case "ActionEvent": {
        const thought = texts(event.thought) || event.summary;
        const entry = h("li", { class: "event event-action", dataset: { actionId: event.id, callId: event.tool_call_id, tool: event.tool_name } },
          h("p", { class: "who" }, "Tool call: ", h("strong", {}, event.tool_name), " ", stamp(event)),
          thought ? h("p", { class: "text thought" }, thought) : null,
          h("pre", { class: "call" }, actionText(event)),
          h("p", { class: "result-state muted" }, "waiting for its result…"));
        this.actions.set(event.id, entry);
        return entry;
      }
      case "ObservationEvent":
      case "AgentErrorEvent":
      case "UserRejectObservation": {
        const target = this.actions.get(event.action_id) ||
          [...this.actions.values()].find((e) => e.dataset.callId === event.tool_call_id);
        const text = event.kind === "ObservationEvent"
          ? texts(event.observation?.content)
          : event.kind === "AgentErrorEvent" ? event.error : `Rejected: ${event.rejection_reason}`;
        const failed = event.kind !== "ObservationEvent" || event.observation?.is_error;
        const result = h("div", { class: `result${failed ? " failed" : ""}` },
          h("p", { class: "who" }, event.kind === "UserRejectObservation" ? "Rejected" : failed ? "Error" : "Result"),
          h("pre", { class: "output" }, text || "(no output)"));
        if (target) {
          target.querySelector(".result-state")?.remove();
          target.dataset.done = "1";
          target.append(result);
          return null;
        }
        return h("li", { class: "event event-result" }, result);
      }
      case "ConversationErrorEvent":
      case "ServerErrorEvent":
        return h("li", { class: "event event-error", role: "note" },
          h("p", { class: "who" }, "Error ", h("code", {}, event.code), " ", stamp(event)),
          h("pre", { class: "output" }, event.detail));
      case "ConversationStateUpdateEvent": {
        if (event.key === "sandbox_status") return sandboxNotice(event);
        let status = null;
        if (event.key === "execution_status") status = event.value;
        else if (event.key === "full_state" && event.value && typeof event.value === "object") {
          status = event.value.execution_status;
        }
        if (!status || status === this.lastStatus) return null;
        this.lastStatus = status;
        return h("li", { class: "event event-state" }, "State: ", h("strong", {}, String(status)), " ", stamp(event));
      }
      case "PauseEvent":
        return h("li", { class: "event event-state" }, "Paused by the user ", stamp(event));
      case "InterruptEvent":
        return h("li", { class: "event event-state" }, "Interrupted by the user ", stamp(event));
      case "SystemPromptEvent":
        return h("li", { class: "event event-system" },
          h("details", {}, h("summary", {}, `System prompt and ${(event.tools || []).length} tools`),
            h("pre", { class: "output" }, event.system_prompt?.text || "")));
      case "Condensation":
      case "CondensationSummaryEvent":
        return h("li", { class: "event event-state" }, "The history was condensed ", stamp(event));
      case "HookExecutionEvent":
        return h("li", { class: "event event-state" },
          `Hook ${event.hook_event_type}: `, h("code", {}, event.hook_command),
          event.blocked ? " (blocked)" : event.success ? "" : " (failed)");
      case "LLMCompletionLogEvent":
      case "TokenEvent":
      case "CondensationRequest":
        return null;
      default:
        return h("li", { class: "event event-state" }, event.kind || "event", " ", stamp(event));
    }
  }
}
