// A conversation being started: its start task's stages as one short progress line with the
// time it has taken, then straight into the conversation (the address is replaced, so Back
// goes to the list). Where an LLM is set, the model is asked for a better title meanwhile.
//
// The page's state is the start task as last read (`update` with its "read" action, every
// 100 ms for the first seconds, when a start usually ends, then every 400 ms); `render` adds
// the stages not drawn yet and ends the page.
import { api } from "./api.js";
import { h, notify } from "./dom.js";
import { elapsed } from "./progress.js";
import { errorParts } from "./errors.js";
import { createStore } from "./store.js";
import { START, START_ENDED, START_WORDS, startStage } from "./schema.js";

export const initialState = Object.freeze({
  known: true, // false: no start task has this id
  stages: [], // the stages seen, in order (a stage read twice is one)
  task: null, // the start task as last read
});

export function update(state, action) {
  switch (action.type) {
    case "read": { // {task}: the start task, or null when it is not known
      const { task } = action;
      if (!task) return { ...state, known: false };
      const stage = startStage(task.status);
      const stages = state.stages[state.stages.length - 1] === stage ? state.stages : [...state.stages, stage];
      return { ...state, stages, task: { ...task, status: stage } };
    }
    default:
      return state;
  }
}

function words(stage) {
  return START_WORDS[stage] || stage;
}

export function startPage(main, taskId) {
  let stopped = false;
  const began = Date.now();
  const what = h("span", { class: "what" }, "Starting");
  const time = h("span", { class: "elapsed" }, "0 s");
  const line = h("p", { class: "progress-line start-line", role: "status" },
    h("span", { class: "spinner", "aria-hidden": "true" }), what, " ", time);
  const stages = h("ol", { class: "progress", "aria-label": "Start progress" });
  const failure = h("div", { class: "card event-error", role: "alert", hidden: true });
  const asked = sessionStorage.getItem(`start:${taskId}`);
  main.append(h("h1", {}, "Starting a conversation"),
    asked ? h("ol", { class: "events" }, h("li", { class: "event event-message from-user" },
      h("p", { class: "who" }, "You"), h("p", { class: "text" }, asked))) : null,
    line, stages, failure);
  document.title = "Starting · Agent console";
  const tick = setInterval(() => { time.textContent = elapsed(Date.now() - began); }, 1000);

  async function titleFromModel(conversationId) {
    try {
      const settings = await api("/settings");
      if (settings.llm_model) await api(`/app-conversations/${conversationId}/generate-title`, { method: "POST" });
    } catch {
      // the first message's title stays
    }
  }

  function render(state, previous) {
    if (!state.known) {
      what.textContent = "This start is not known.";
      return;
    }
    if (state.stages !== previous.stages) {
      for (const stage of state.stages.slice(previous.stages.length)) {
        stages.append(h("li", { dataset: { stage } }, words(stage)));
      }
      what.textContent = `${words(state.stages[state.stages.length - 1])}…`;
    }
    const { task } = state;
    if (START_ENDED.has(task.status)) sessionStorage.removeItem(`start:${taskId}`);
    if (task.status === START.READY) {
      titleFromModel(task.app_conversation_id);
      location.replace(`#/conversations/${task.app_conversation_id}`);
    } else if (task.status === START.ERROR) {
      clearInterval(tick);
      line.hidden = true;
      failure.hidden = false;
      failure.append(h("h2", {}, "The conversation could not start"), ...errorParts(task.detail || "the start failed"),
        h("p", {}, h("a", { href: "#/conversations" }, "Back to the conversations")));
    }
  }

  const page = createStore(initialState, update, render);

  (async () => {
    try {
      for (;;) {
        const [task] = await api("/app-conversations/start-tasks", { query: { ids: taskId } });
        if (stopped) return;
        const state = page.dispatch({ type: "read", task: task || null });
        if (!state.known || START_ENDED.has(state.task.status)) return;
        await new Promise((resolve) => setTimeout(resolve, Date.now() - began < 3000 ? 100 : 400));
      }
    } catch (error) {
      notify(`Could not follow the start: ${error.message}`, "error");
    }
  })();
  return () => { stopped = true; clearInterval(tick); };
}
