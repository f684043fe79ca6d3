// Settings, "Application": the grouping strategy (SPEC 1's five values), the LLM (its key can be
// written, never read back), default tools and the git author.
import { api } from "./api.js";
import { field, h, notify } from "./dom.js";

const STRATEGIES = [
  ["NO_GROUPING", "No grouping", "A new sandbox for each conversation"],
  ["GROUP_BY_NEWEST", "Group by newest", "The newest available sandbox"],
  ["LEAST_RECENTLY_USED", "Least recently used", "The least recently used available sandbox"],
  ["FEWEST_CONVERSATIONS", "Fewest conversations", "The available sandbox with the fewest conversations"],
  ["ADD_TO_ANY", "Add to any", "The first available sandbox"],
];
const TOOLS = [
  ["terminal", "Terminal"], ["file_editor", "File editor"], ["task_tracker", "Task tracker"],
  ["browser_tool_set", "Browser"],
];

export function settingsPage(main) {
  const strategies = STRATEGIES.map(([value, label, hint]) => {
    const input = h("input", { type: "radio", name: "grouping_strategy", value, id: `g-${value}`,
      "aria-describedby": `g-${value}-hint` });
    return [input, h("div", { class: "choice" }, input,
      h("label", { for: input.id }, label), h("span", { class: "hint", id: `g-${value}-hint` }, hint))];
  });
  const model = h("input", { name: "llm_model", placeholder: "openai/gpt-4o", autocomplete: "off" });
  const baseUrl = h("input", { name: "llm_base_url", type: "url", placeholder: "https://api.openai.com/v1", autocomplete: "off" });
  const apiKey = h("input", { name: "llm_api_key", type: "password", autocomplete: "new-password" });
  const keyState = h("span", { class: "muted" });
  const clearKey = h("input", { type: "checkbox", name: "clear_key" });
  const stream = h("input", { type: "checkbox", name: "llm_stream", id: "llm-stream" });
  const tools = TOOLS.map(([value, label]) => {
    const input = h("input", { type: "checkbox", name: "default_tools", value, id: `t-${value}` });
    return [input, h("div", { class: "choice" }, input, h("label", { for: input.id }, label))];
  });
  const gitName = h("input", { name: "git_user_name", autocomplete: "off" });
  const gitEmail = h("input", { name: "git_user_email", type: "email", autocomplete: "off" });
  const save = h("button", { type: "submit" }, "Save");

  const form = h("form", { class: "card", "aria-labelledby": "settings-title" },
    h("h1", { id: "settings-title" }, "Settings"),
    h("h2", {}, "Application"),
    h("fieldset", {}, h("legend", {}, "Sandbox grouping strategy"),
      h("p", { class: "hint" }, "Where a new conversation is placed when you do not pick a sandbox."),
      strategies.map(([, row]) => row)),
    h("fieldset", {}, h("legend", {}, "Language model"),
      field("Model", model),
      field("Base URL", baseUrl, "Optional."),
      field("API key", apiKey, "Write-only: it is stored encrypted and never shown again. Leave empty to keep it."),
      keyState,
      h("div", { class: "choice" }, clearKey, h("label", { for: (clearKey.id = "clear-key") }, "Remove the stored key")),
      h("div", { class: "choice" }, stream,
        h("label", { for: stream.id }, "Show the model's text as it is written"),
        h("span", { class: "hint" }, "Streaming: for conversations started from now on."))),
    h("fieldset", {}, h("legend", {}, "Default tools"), tools.map(([, row]) => row)),
    h("fieldset", {}, h("legend", {}, "Git author"), field("Name", gitName), field("Email", gitEmail)),
    save);
  main.append(form);
  // Nothing can be typed until the stored settings are in the form: filling it must not
  // overwrite what someone already typed.
  const controls = [...form.elements];
  const enable = (on) => { for (const control of controls) control.disabled = !on; };
  enable(false);

  function fill(settings) {
    for (const [input] of strategies) input.checked = input.value === settings.grouping_strategy;
    model.value = settings.llm_model || "";
    baseUrl.value = settings.llm_base_url || "";
    apiKey.value = "";
    clearKey.checked = false;
    keyState.textContent = settings.llm_api_key ? "A key is stored." : "No key is stored.";
    stream.checked = Boolean(settings.llm_stream);
    for (const [input] of tools) input.checked = settings.default_tools.includes(input.value);
    gitName.value = settings.git_user_name || "";
    gitEmail.value = settings.git_user_email || "";
    enable(true);
  }

  api("/settings").then(fill).catch((error) => {
    enable(true);
    notify(`Could not read the settings: ${error.message}`, "error");
  });

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = {
      grouping_strategy: strategies.find(([input]) => input.checked)?.[0].value,
      llm_model: model.value.trim() || null,
      llm_base_url: baseUrl.value.trim() || null,
      llm_stream: stream.checked,
      default_tools: tools.filter(([input]) => input.checked).map(([input]) => input.value),
      git_user_name: gitName.value.trim() || null,
      git_user_email: gitEmail.value.trim() || null,
    };
    if (!body.grouping_strategy) delete body.grouping_strategy;
    if (apiKey.value) body.llm_api_key = apiKey.value;
    else if (clearKey.checked) body.llm_api_key = null;
    save.disabled = true;
    try {
      fill(await api("/settings", { method: "PATCH", body }));
      notify("Settings saved.");
    } catch (error) {
      notify(`Could not save: ${error.message}`, "error");
    } finally {
      save.disabled = false;
    }
  });
  return null;
}
