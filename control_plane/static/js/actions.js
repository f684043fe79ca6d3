// A tool call and its result as a person reads them: a command with its output and exit status,
// a file edit as a diff, a created file with a preview, a thought as prose, MCP and browser
// calls by name. The raw event stays one click away. Everything goes in as text; the one
// picture shown is a browser screenshot from a data:image URL (the CSP allows no other source).
import { h } from "./dom.js";
import { lineDiff } from "./diff.js";
import { ACTION, BROWSER_ACTION_PREFIX, EVENT, OBSERVATION } from "./schema.js";

const FOLD_LINES = 20; // longer output shows its last lines, the rest one click away
const PREVIEW_LINES = 12;
const TRAILER = /^\[(Current working directory|Python interpreter|Command finished with exit code)[^\]]*\]$/;

export function texts(content) {
  return (content || []).filter((c) => c && c.type === "text").map((c) => c.text).join("\n");
}

function images(content) {
  return (content || []).filter((c) => c && c.type === "image")
    .flatMap((c) => c.image_urls || [])
    .filter((u) => typeof u === "string" && /^data:image\/(png|jpeg|webp|gif);base64,/.test(u));
}

function lines(text) {
  const out = String(text ?? "").split("\n");
  if (out.length > 1 && out[out.length - 1] === "") out.pop();
  return out;
}

// Everything set in an object, as "name: value" lines (no nulls, no JSON escapes).
function fields(object) {
  const out = [];
  for (const [name, value] of Object.entries(object || {})) {
    if (name === "kind" || value === null || value === undefined || value === "" ||
        (Array.isArray(value) && !value.length)) continue;
    out.push(`${name}: ${typeof value === "string" ? value : JSON.stringify(value, null, 2)}`);
  }
  return out.join("\n");
}

// A card's one fold, "Details": what the card leaves out (a file as read, the whole file's
// diff) and the raw events, the call's and then its result's. Nothing else on a card folds.
export function raw(event, label = "The call as sent") {
  return h("details", { class: "raw" }, h("summary", {}, "Details"),
    h("p", { class: "raw-label" }, label),
    h("pre", { class: "raw-json", tabindex: "0" }, JSON.stringify(event, null, 2)));
}

// More in a card's fold: `parts` (elements) after what it holds.
export function addToFold(fold, parts) {
  fold.append(...[parts].flat(Infinity).filter(Boolean));
}

// The raw event of a result, for the fold of its call's card.
export function rawResult(event) {
  return [h("p", { class: "raw-label" }, "The result as received"),
    h("pre", { class: "raw-json", tabindex: "0" }, JSON.stringify(event, null, 2))];
}

// Output of any length: the last FOLD_LINES lines, the earlier ones behind a "Show all" button
// (a button, not a fold: a card has one fold, its Details).
export function folded(text, className = "output") {
  const all = lines(text);
  if (all.length <= FOLD_LINES) return h("pre", { class: className, tabindex: "0" }, all.join("\n") || "(no output)");
  const earlier = h("pre", { class: className, hidden: true, tabindex: "0" }, all.slice(0, -FOLD_LINES).join("\n"));
  const toggle = h("button", { type: "button", class: "link", "aria-expanded": "false", onclick: () => {
    earlier.hidden = !earlier.hidden;
    toggle.setAttribute("aria-expanded", String(!earlier.hidden));
    toggle.textContent = earlier.hidden ? `Show all ${all.length} lines` : `Show the last ${FOLD_LINES} lines only`;
  } }, `Show all ${all.length} lines`);
  return h("div", { class: "folded" }, toggle, earlier,
    h("pre", { class: className, tabindex: "0" }, all.slice(-FOLD_LINES).join("\n")));
}

export function diffView(original, modified) {
  const view = h("pre", { class: "diff", tabindex: "0" });
  for (const [sign, line] of lineDiff(original, modified)) {
    view.append(h("span", { class: sign === "+" ? "add" : sign === "-" ? "del" : "same" }, `${sign} ${line}\n`));
  }
  return view;
}

// What an action is, in words: [title, body element or null]. `shortPath` shows a file's path
// as the user knows it (relative to the working directory).
export function describeAction(event, shortPath = (path) => String(path || "")) {
  const action = event.action || {};
  const args = event.tool_call?.arguments;
  switch (action.kind) {
    case ACTION.TERMINAL:
      return ["Ran a command", h("pre", { class: "call" }, `$ ${action.command ?? ""}`)];
    case ACTION.FILE_EDITOR:
    case ACTION.PLANNING_FILE_EDITOR: {
      const path = shortPath(action.path);
      switch (action.command) {
        case "create":
          return [`Created ${path}`, preview(action.file_text)];
        case "str_replace":
          return [`Edited ${path}`, diffView(action.old_str ?? "", action.new_str ?? "")];
        case "insert":
          return [`Edited ${path}`, h("pre", { class: "diff" },
            lines(action.new_str).map((line) => h("span", { class: "add" }, `+ ${line}\n`)))];
        case "undo_edit":
          return [`Undid the last edit of ${path}`, null];
        default:
          return [`Read ${path}`, null];
      }
    }
    case ACTION.THINK:
      return ["Thought", h("p", { class: "text prose" }, action.thought)];
    case ACTION.MCP_TOOL:
      return [`MCP tool ${event.tool_name}`, h("pre", { class: "call" }, fields(action.data))];
    case ACTION.TASK_TRACKER:
      return ["Updated the task list", h("pre", { class: "call" }, (action.task_list || [])
        .map((t) => `${t.status === "done" ? "[x]" : t.status === "in_progress" ? "[~]" : "[ ]"} ${t.title}`).join("\n")
        || fields(action))];
    default:
      if (String(action.kind || "").startsWith(BROWSER_ACTION_PREFIX)) {
        const what = action.kind.slice(BROWSER_ACTION_PREFIX.length).replace(/Action$/, "").replace(/([a-z])([A-Z])/g, "$1 $2").toLowerCase();
        return [`Browser: ${what}`, fields(action) ? h("pre", { class: "call" }, fields(action)) : null];
      }
      return [`Tool ${event.tool_name}`, h("pre", { class: "call" },
        fields(action.kind ? action : null) || (typeof args === "string" ? args : JSON.stringify(args ?? {}, null, 2)))];
  }
}

function preview(text) {
  const all = lines(text);
  const shown = all.slice(0, PREVIEW_LINES).join("\n");
  return h("div", {}, h("pre", { class: "preview", tabindex: "0" }, shown || "(empty file)"),
    all.length > PREVIEW_LINES ? h("p", { class: "muted" }, `… ${all.length - PREVIEW_LINES} more lines`) : null);
}

// A terminal's output without the trailer lines the model reads ("[Current working
// directory: …]"): the exit status is shown on its own.
function terminalOutput(text) {
  return lines(text).filter((line) => !TRAILER.test(line)).join("\n");
}

// An observation (or an error, or a rejection) as the result part of its call's entry:
// [what the card shows, what goes in its fold] (either null).
export function describeResult(event) {
  const shown = resultParts(event);
  return shown && shown.fold ? [null, shown.fold] : [shown, null];
}

function resultParts(event) {
  if (event.kind === EVENT.AGENT_ERROR) {
    return h("div", { class: "result failed" }, h("p", { class: "who" }, "Error"), folded(event.error));
  }
  if (event.kind === EVENT.USER_REJECT) {
    return h("div", { class: "result failed" }, h("p", { class: "who" }, "Rejected"),
      h("p", { class: "text" }, event.rejection_reason || "You rejected it."));
  }
  const observation = event.observation || {};
  const text = texts(observation.content);
  const failed = Boolean(observation.is_error);
  switch (observation.kind) {
    case OBSERVATION.TERMINAL: {
      const code = observation.exit_code ?? observation.metadata?.exit_code;
      const ok = code === 0 && !failed;
      const status = observation.timeout ? "still running (timed out waiting)"
        : code === -1 ? "still running" : code === null || code === undefined ? "no exit status" : `exit ${code}`;
      return h("div", { class: `result${ok ? "" : " failed"}`, dataset: { exitCode: String(code ?? "") } },
        h("p", { class: "who" }, ok ? "Output" : "Failed", " ", h("span", { class: `exit ${ok ? "ok" : "bad"}` }, status)),
        folded(terminalOutput(text)));
    }
    case OBSERVATION.FILE_EDITOR:
    case OBSERVATION.PLANNING_FILE_EDITOR: {
      if (failed) return h("div", { class: "result failed" }, h("p", { class: "who" }, "Failed"), folded(text));
      if (observation.command === "view") {
        return { fold: [h("p", { class: "raw-label" }, "What was read"), folded(text)] };
      }
      if (observation.old_content !== null && observation.old_content !== undefined &&
          observation.new_content !== null && observation.new_content !== undefined && observation.prev_exist) {
        return { fold: [h("p", { class: "raw-label" }, "The whole file's diff"),
          diffView(observation.old_content, observation.new_content)] };
      }
      return null;
    }
    case OBSERVATION.FINISH:
    case OBSERVATION.THINK:
      return null;
    default: {
      const pictures = images(observation.content);
      return h("div", { class: `result${failed ? " failed" : ""}` },
        h("p", { class: "who" }, failed ? "Error" : "Result"),
        folded(text),
        pictures.map((src) => h("img", { src, alt: "Browser screenshot", class: "screenshot" })));
    }
  }
}
