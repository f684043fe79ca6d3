// The workspace panel's state, changed one way (js/store.js): which tab is shown, the terminal's
// commands with their output as it streams, the agent's browser as it last was, and the app
// link. `panelUpdate` is pure; workspace.js turns the conversation's events into its actions
// and draws the state.
import { texts } from "./actions.js";
import { ACTION, BROWSER_ACTION_PREFIX, EVENT, OBSERVATION } from "./schema.js";

export const TABS = Object.freeze([
  ["changes", "Changes"],
  ["files", "Files"],
  ["terminal", "Terminal"],
  ["browser", "Browser"],
  ["app", "App"],
]);

// The port the App tab offers first: the OpenHands app server's WORKER_1.
export const DEFAULT_APP_PORT = 8011;
const OUTPUT_CHARS = 64_000; // of one command's output kept on the page
const TRAILER = /^\[(Current working directory|Python interpreter|Command finished with exit code)[^\]]*\]$/;

export const panelState = Object.freeze({
  tab: "changes",
  terminal: [], // {id, command, output, exit, running, order}, in the order they ran
  calls: 0, // terminal calls seen
  browser: null, // {url, shot}: what the agent's browser last showed
  app: { port: DEFAULT_APP_PORT, link: null, error: null }, // link: {path, port, expires_at}
});

// A terminal's output as a person reads it: without the lines the model is told besides.
function shown(text) {
  return String(text ?? "").split("\n").filter((line) => !TRAILER.test(line)).join("\n").replace(/\n+$/, "");
}

function withCommand(state, id, change) {
  const found = state.terminal.findIndex((c) => c.id === id);
  const before = found >= 0 ? state.terminal[found]
    : { id, command: "", output: "", exit: null, running: true, order: Infinity };
  const after = { ...before, ...change(before) };
  const terminal = found >= 0
    ? state.terminal.map((c, i) => (i === found ? after : c))
    : [...state.terminal, after];
  return { ...state, terminal };
}

// The actions an event of the stream is for the panel (none for most).
export function eventActions(event) {
  if (event.kind === EVENT.ACTION && event.action?.kind === ACTION.TERMINAL) {
    return [{ type: "command", id: event.tool_call_id, command: String(event.action.command ?? "") }];
  }
  if (event.kind === EVENT.ACTION && String(event.action?.kind || "").startsWith(BROWSER_ACTION_PREFIX) &&
      typeof event.action.url === "string") {
    return [{ type: "browser", url: event.action.url }];
  }
  if (event.kind !== EVENT.OBSERVATION) return [];
  const observation = event.observation || {};
  if (observation.kind === OBSERVATION.TERMINAL) {
    const exit = observation.exit_code ?? observation.metadata?.exit_code ?? null;
    return [{ type: "result", id: event.tool_call_id, output: texts(observation.content), exit,
      running: exit === -1 || Boolean(observation.timeout) }];
  }
  if (String(observation.kind || "").startsWith(BROWSER_ACTION_PREFIX)) {
    const url = /^URL: (.+)$/m.exec(texts(observation.content))?.[1];
    const shot = (observation.content || []).flatMap((c) => (c && c.type === "image" ? c.image_urls || [] : []))
      .filter((u) => typeof u === "string" && /^data:image\/(png|jpeg|webp|gif);base64,/.test(u)).pop();
    return url || shot ? [{ type: "browser", url, shot }] : [];
  }
  return [];
}

export function panelUpdate(state, action) {
  switch (action.type) {
    case "tab":
      return state.tab === action.tab ? state : { ...state, tab: action.tab };
    case "command": { // a terminal call: shown at once, running, in the order the calls came
      // (its live output may come before the call itself, which a replay brings later)
      const next = withCommand(state, action.id, () => ({ command: action.command, order: state.calls }));
      return { ...next, calls: state.calls + 1,
        terminal: [...next.terminal].sort((a, b) => a.order - b.order) };
    }
    case "output": // a running command's output so far (the transient path)
      return withCommand(state, action.id, (c) => (c.running
        ? { output: (c.output + action.output).slice(-OUTPUT_CHARS) } : {}));
    case "result": // its observation: the whole output and the exit status
      return withCommand(state, action.id, () => ({ output: shown(action.output).slice(-OUTPUT_CHARS),
        exit: action.exit, running: action.running }));
    case "browser":
      return { ...state, browser: { url: action.url ?? state.browser?.url ?? null,
        shot: action.shot ?? state.browser?.shot ?? null } };
    case "app-port":
      return { ...state, app: { ...state.app, port: action.port } };
    case "app-link": // {link} or {error}
      return { ...state, app: { ...state.app, link: action.link ?? null, error: action.error ?? null } };
    default:
      return state;
  }
}
