// A conversation being started: its start task's stages as one short progress line with the
// time it has taken, then straight into the conversation (the address is replaced, so Back
// goes to the list). Where an LLM is set, the model is asked for a better title meanwhile.
import { api } from "./api.js";
import { h, notify } from "./dom.js";
import { elapsed } from "./progress.js";
import { errorParts } from "./errors.js";

const STAGES = {
  WORKING: "Preparing",
  WAITING_FOR_SANDBOX: "Starting a sandbox",
  PREPARING_REPOSITORY: "Cloning the repository",
  RUNNING_SETUP_SCRIPT: "Running the setup script",
  SETTING_UP_GIT_HOOKS: "Setting up Git hooks",
  SETTING_UP_SKILLS: "Loading skills",
  STARTING_CONVERSATION: "Starting the conversation",
  READY: "Ready",
  ERROR: "Failed",
};

export function startPage(main, taskId) {
  let stopped = false;
  const began = Date.now();
  const seen = [];
  const line = h("p", { class: "progress-line start-line", role: "status" },
    h("span", { class: "spinner", "aria-hidden": "true" }), h("span", { class: "what" }, "Starting"), " ",
    h("span", { class: "elapsed" }, "0 s"));
  const stages = h("ol", { class: "progress", "aria-label": "Start progress" });
  const failure = h("div", { class: "card event-error", role: "alert", hidden: true });
  const asked = sessionStorage.getItem(`start:${taskId}`);
  main.append(h("h1", {}, "Starting a conversation"),
    asked ? h("ol", { class: "events" }, h("li", { class: "event event-message from-user" },
      h("p", { class: "who" }, "You"), h("p", { class: "text" }, asked))) : null,
    line, stages, failure);
  document.title = "Starting · Agent console";
  const tick = setInterval(() => { line.querySelector(".elapsed").textContent = elapsed(Date.now() - began); }, 1000);

  async function titleFromModel(conversationId) {
    try {
      const settings = await api("/settings");
      if (settings.llm_model) await api(`/app-conversations/${conversationId}/generate-title`, { method: "POST" });
    } catch {
      // the first message's title stays
    }
  }

  (async () => {
    try {
      for (;;) {
        const [task] = await api("/app-conversations/start-tasks", { query: { ids: taskId } });
        if (stopped) return;
        if (!task) {
          line.querySelector(".what").textContent = "This start is not known.";
          return;
        }
        const status = String(task.status).toUpperCase();
        if (seen[seen.length - 1] !== status) {
          seen.push(status);
          stages.append(h("li", { dataset: { stage: status } }, STAGES[status] || status));
          line.querySelector(".what").textContent = `${STAGES[status] || status}…`;
        }
        if (status === "READY" || status === "ERROR") sessionStorage.removeItem(`start:${taskId}`);
        if (status === "READY") {
          titleFromModel(task.app_conversation_id);
          location.replace(`#/conversations/${task.app_conversation_id}`);
          return;
        }
        if (status === "ERROR") {
          clearInterval(tick);
          line.hidden = true;
          failure.hidden = false;
          failure.append(h("h2", {}, "The conversation could not start"), ...errorParts(task.detail || "the start failed"),
            h("p", {}, h("a", { href: "#/conversations" }, "Back to the conversations")));
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, 400));
      }
    } catch (error) {
      notify(`Could not follow the start: ${error.message}`, "error");
    }
  })();
  return () => { stopped = true; clearInterval(tick); };
}
