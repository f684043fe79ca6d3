// The wire's vocabulary, named once: the event kinds, the tool payloads and the state keys the
// console reads off a conversation's events, the agent server's execution statuses, the control
// plane's sandbox statuses (and why a sandbox is in one) and a conversation start's stages,
// with the words a person sees for them; the tools, the confirmation policies and the grouping
// strategies the settings offer. The spellings are the API's (SPEC 1, 3.1, 3.2, 3.4 and 6.2;
// `events/kinds.py`, `events/status.py` and `control_plane/models.py` on the server): the
// pages import these names instead of spelling strings, so a kind renamed on the wire is
// renamed here alone, and a status compared in the wrong case cannot happen.

// What `event.kind` says (SPEC 6.2), among the kinds the console draws or skips by name.
export const EVENT = Object.freeze({
  MESSAGE: "MessageEvent",
  ACTION: "ActionEvent",
  OBSERVATION: "ObservationEvent",
  AGENT_ERROR: "AgentErrorEvent",
  USER_REJECT: "UserRejectObservation",
  ACP_TOOL_CALL: "ACPToolCallEvent",
  CONVERSATION_ERROR: "ConversationErrorEvent",
  SERVER_ERROR: "ServerErrorEvent",
  STATE_UPDATE: "ConversationStateUpdateEvent",
  PAUSE: "PauseEvent",
  INTERRUPT: "InterruptEvent",
  SYSTEM_PROMPT: "SystemPromptEvent",
  CONDENSATION: "Condensation",
  CONDENSATION_SUMMARY: "CondensationSummaryEvent",
  CONDENSATION_REQUEST: "CondensationRequest",
  HOOK_EXECUTION: "HookExecutionEvent",
  LLM_COMPLETION_LOG: "LLMCompletionLogEvent",
  TOKEN: "TokenEvent",
  STREAMING_DELTA: "StreamingDeltaEvent",
});

// Who an event is from (`event.source`).
export const SOURCE = Object.freeze({ AGENT: "agent", USER: "user" });

// The `key` of a ConversationStateUpdateEvent the console reads: the execution status, the whole
// state (holding it too), the control plane's notice of the sandbox's status ({sandbox_id,
// status, reason, detail}), a model call being retried ({retry_in, error}; live only) and a
// switch of the conversation's model ({model, base_url, reason, …}).
export const STATE_KEY = Object.freeze({
  EXECUTION_STATUS: "execution_status",
  FULL_STATE: "full_state",
  SANDBOX_STATUS: "sandbox_status",
  LLM_RETRY: "llm_retry",
  LLM: "llm",
});

// The tools' payloads (`event.action.kind`, `event.observation.kind`) drawn in their own way.
export const ACTION = Object.freeze({
  TERMINAL: "TerminalAction",
  FILE_EDITOR: "FileEditorAction",
  PLANNING_FILE_EDITOR: "PlanningFileEditorAction",
  THINK: "ThinkAction",
  FINISH: "FinishAction",
  MCP_TOOL: "MCPToolAction",
  TASK_TRACKER: "TaskTrackerAction",
});
export const BROWSER_ACTION_PREFIX = "Browser"; // BrowserNavigateAction, BrowserClickAction…

export const OBSERVATION = Object.freeze({
  TERMINAL: "TerminalObservation",
  FILE_EDITOR: "FileEditorObservation",
  PLANNING_FILE_EDITOR: "PlanningFileEditorObservation",
  FINISH: "FinishObservation",
  THINK: "ThinkObservation",
});

// The file editors' results, whose edits the workspace lists as "Changes of this run".
export const FILE_EDITOR_OBSERVATIONS = new Set([
  OBSERVATION.FILE_EDITOR,
  OBSERVATION.PLANNING_FILE_EDITOR,
]);

// The tools a conversation can be given, by their names on the wire (`tool_name` of their
// calls, `default_tools` of the settings), with their words; the terminal's calls have their
// command on the progress line.
export const TOOL = Object.freeze({
  TERMINAL: "terminal",
  FILE_EDITOR: "file_editor",
  TASK_TRACKER: "task_tracker",
  BROWSER: "browser_tool_set",
});
export const TERMINAL_TOOL = TOOL.TERMINAL;

export const TOOL_WORDS = Object.freeze([
  [TOOL.TERMINAL, "Terminal"],
  [TOOL.FILE_EDITOR, "File editor"],
  [TOOL.TASK_TRACKER, "Task tracker"],
  [TOOL.BROWSER, "Browser"],
]);

// A conversation's confirmation policy (`policy.kind`): every action waits for approval, or none.
export const CONFIRMATION = Object.freeze({ ALWAYS: "AlwaysConfirm", NEVER: "NeverConfirm" });

// An ACP tool call's `status` once it ended (it went through "pending" and "in_progress").
export const ACP_ENDED = new Set(["completed", "failed"]);

// A conversation's execution status (SPEC 3.2), lowercase as the agent server and the
// app-conversation record say it.
export const EXECUTION = Object.freeze({
  IDLE: "idle",
  RUNNING: "running",
  PAUSED: "paused",
  WAITING_FOR_CONFIRMATION: "waiting_for_confirmation",
  FINISHED: "finished",
  ERROR: "error",
  STUCK: "stuck",
});

// The execution status a value names, in the wire's case whatever case it came in (OpenHands'
// servers and older records say it in capitals); null when there is none. A status this list
// does not know passes through, so the page still shows it.
export function executionStatus(value) {
  return value ? String(value).toLowerCase() : null;
}

// How the console shows an execution status: in words ("Waiting for your approval", never the
// wire's WAITING_FOR_CONFIRMATION). Null for none; a status this list does not know is said
// with its underscores as spaces.
export const EXECUTION_WORDS = Object.freeze({
  [EXECUTION.IDLE]: "Idle",
  [EXECUTION.RUNNING]: "Working",
  [EXECUTION.PAUSED]: "Paused",
  [EXECUTION.WAITING_FOR_CONFIRMATION]: "Waiting for your approval",
  [EXECUTION.FINISHED]: "Finished",
  [EXECUTION.ERROR]: "Failed",
  [EXECUTION.STUCK]: "Stuck",
});

export function executionWord(status) {
  if (!status) return null;
  const known = EXECUTION_WORDS[executionStatus(status)];
  if (known) return known;
  const said = String(status).toLowerCase().replace(/_/g, " ");
  return said.charAt(0).toUpperCase() + said.slice(1);
}

// A sandbox's status (SPEC 3.1), in capitals on the wire; with its word in a sentence.
export const SANDBOX = Object.freeze({
  STARTING: "STARTING",
  RUNNING: "RUNNING",
  PAUSED: "PAUSED",
  ERROR: "ERROR",
  MISSING: "MISSING",
});

export const SANDBOX_WORDS = Object.freeze({
  [SANDBOX.STARTING]: "Starting",
  [SANDBOX.RUNNING]: "Running",
  [SANDBOX.PAUSED]: "Paused",
  [SANDBOX.ERROR]: "Error",
  [SANDBOX.MISSING]: "Missing",
});

// ERROR and MISSING are for good (SPEC 3.1): its conversations are read-only, and nothing can be
// done to the sandbox any more but reading what it was.
// A sandbox's status in a word ("Paused"), whatever case it came in; null for none.
export function sandboxWord(status) {
  if (!status) return null;
  const known = SANDBOX_WORDS[String(status).toUpperCase()];
  if (known) return known;
  const said = String(status).toLowerCase().replace(/_/g, " ");
  return said.charAt(0).toUpperCase() + said.slice(1);
}

export const SANDBOX_ENDED = new Set([SANDBOX.ERROR, SANDBOX.MISSING]);

// Why a sandbox last changed status (`status_reason`, and `reason` in a sandbox_status notice).
export const SANDBOX_REASON = Object.freeze({
  USER: "USER",
  IDLE: "IDLE",
  SESSION_CAP: "SESSION_CAP",
  DELETION_TIME: "DELETION_TIME",
  VANISHED: "VANISHED",
  UNHEALTHY: "UNHEALTHY",
  START_FAILED: "START_FAILED",
});

// A conversation start's stages (SPEC 2.2, 3.4), in capitals; READY and ERROR end it. The
// setup stages are OpenHands' (this control plane goes from PREPARING_REPOSITORY straight to
// STARTING_CONVERSATION): a start task from either is followed in words.
export const START = Object.freeze({
  WORKING: "WORKING",
  WAITING_FOR_SANDBOX: "WAITING_FOR_SANDBOX",
  PREPARING_REPOSITORY: "PREPARING_REPOSITORY",
  RUNNING_SETUP_SCRIPT: "RUNNING_SETUP_SCRIPT",
  SETTING_UP_GIT_HOOKS: "SETTING_UP_GIT_HOOKS",
  SETTING_UP_SKILLS: "SETTING_UP_SKILLS",
  STARTING_CONVERSATION: "STARTING_CONVERSATION",
  READY: "READY",
  ERROR: "ERROR",
});

export const START_WORDS = Object.freeze({
  [START.WORKING]: "Preparing",
  [START.WAITING_FOR_SANDBOX]: "Starting a sandbox",
  [START.PREPARING_REPOSITORY]: "Cloning the repository",
  [START.RUNNING_SETUP_SCRIPT]: "Running the setup script",
  [START.SETTING_UP_GIT_HOOKS]: "Setting up Git hooks",
  [START.SETTING_UP_SKILLS]: "Loading skills",
  [START.STARTING_CONVERSATION]: "Starting the conversation",
  [START.READY]: "Ready",
  [START.ERROR]: "Failed",
});

export const START_ENDED = new Set([START.READY, START.ERROR]);

// A start task's stage as the wire names it, whatever case it came in.
export function startStage(value) {
  return String(value).toUpperCase();
}

// Where a new conversation goes when its start names no sandbox: the grouping strategies of the
// settings (SPEC 1's five values), as [value, name, what it does], in the order offered.
export const GROUPING = Object.freeze([
  ["NO_GROUPING", "No grouping", "A new sandbox for each conversation"],
  ["GROUP_BY_NEWEST", "Group by newest", "The newest available sandbox"],
  ["LEAST_RECENTLY_USED", "Least recently used", "The least recently used available sandbox"],
  [
    "FEWEST_CONVERSATIONS",
    "Fewest conversations",
    "The available sandbox with the fewest conversations",
  ],
  ["ADD_TO_ANY", "Add to any", "The first available sandbox"],
]);
