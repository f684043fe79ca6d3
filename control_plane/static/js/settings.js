// Settings, "Application": the grouping strategy (SPEC 1's five values), the LLM (its key can be
// written, never read back; the model field suggests the names litellm knows; "Test connection"
// tries the form's values), the LLM limits with today's use, default tools, the network of new
// sandboxes (network.js), the git author and secrets (by name: their values are write-only too).
import { api } from "./api.js";
import { clear, cost, field, h, notify } from "./dom.js";
import { explain, problemsAt } from "./errors.js";
import { fillNetwork, networkFieldset, readNetwork, showProblems } from "./network.js";
import { createStore } from "./store.js";
import { GROUPING, TOOL_WORDS } from "./schema.js";

// The page's state: the settings as stored (the form is filled from them, then holds what is
// typed until Save), the secrets' names, and what the page read or tried besides. The form's
// fields are not in it: they are the person's draft, read when it is sent.
export const initialState = Object.freeze({
  ready: false, // the stored settings are in the form (or could not be read): it can be typed in
  stored: null, // GET /settings, or a save's answer
  secretNames: [],
  saving: false,
  test: null, // "Test connection": {testing}, {result} (POST /settings/llm-check) or {error}
  usage: null, // today's use (GET /llm-usage) or {error}
  models: [], // the model names litellm knows, suggested in the model field
});

export function update(state, action) {
  switch (action.type) {
    case "stored": // {settings}
      return { ...state, ready: true, stored: action.settings, secretNames: action.settings.secret_names || [] };
    case "unreadable": // the settings could not be read: the form is open anyway
      return { ...state, ready: true };
    case "secrets": // {names}: the secrets stored after a change of them
      return { ...state, secretNames: action.names };
    case "saving":
      return { ...state, saving: true };
    case "saved": // the save ended, saved or not
      return { ...state, saving: false };
    case "test": // {test}
      return { ...state, test: action.test };
    case "usage": // {usage}
      return { ...state, usage: action.usage };
    case "models": // {models}
      return { ...state, models: action.models };
    default:
      return state;
  }
}

// The models people use most, first in the picker (those litellm knows, in this order).
export const MOST_USED = Object.freeze([
  "anthropic/claude-sonnet-4-5", "anthropic/claude-opus-4-5", "anthropic/claude-haiku-4-5",
  "gpt-5", "gpt-5-mini", "gpt-4.1", "gpt-4o", "gpt-4o-mini", "o3", "o4-mini",
  "gemini/gemini-2.5-pro", "gemini/gemini-2.5-flash", "deepseek/deepseek-chat",
  "mistral/devstral-medium-2507", "xai/grok-4", "openrouter/anthropic/claude-sonnet-4.5",
]);

// The providers first in the list (the rest follow by name), with their names in words.
const PROVIDERS = Object.freeze([
  ["openai", "OpenAI"], ["anthropic", "Anthropic"], ["gemini", "Google Gemini"],
  ["vertex_ai", "Google Vertex AI"], ["azure", "Azure OpenAI"], ["bedrock", "AWS Bedrock"],
  ["mistral", "Mistral"], ["deepseek", "DeepSeek"], ["xai", "xAI"], ["openrouter", "OpenRouter"],
  ["groq", "Groq"], ["ollama", "Ollama"],
]);

// [[group name, names]]: "Most used", then one group a provider (a name's prefix before its
// first "/"; none: OpenAI's), the main providers first, then the others by name.
export function modelGroups(models) {
  const known = new Set(models);
  const groups = [["Most used", MOST_USED.filter((name) => known.has(name))]];
  const byProvider = new Map();
  for (const name of models) {
    const slash = name.indexOf("/");
    const provider = slash > 0 ? name.slice(0, slash) : "openai";
    if (!byProvider.has(provider)) byProvider.set(provider, []);
    byProvider.get(provider).push(name);
  }
  const words = new Map(PROVIDERS);
  const order = (p) => { const i = PROVIDERS.findIndex(([name]) => name === p); return i < 0 ? PROVIDERS.length : i; };
  const providers = [...byProvider.keys()].sort((a, b) => order(a) - order(b) || a.localeCompare(b));
  for (const provider of providers) groups.push([words.get(provider) || provider, byProvider.get(provider).sort()]);
  return groups.filter(([, names]) => names.length);
}

export function settingsPage(main) {
  const strategies = GROUPING.map(([value, label, hint]) => {
    const input = h("input", { type: "radio", name: "grouping_strategy", value, id: `g-${value}`,
      "aria-describedby": `g-${value}-hint` });
    return [input, h("div", { class: "choice" }, input,
      h("label", { for: input.id }, label), h("span", { class: "hint", id: `g-${value}-hint` }, hint))];
  });
  const model = h("input", { name: "llm_model", placeholder: "openai/gpt-4o", autocomplete: "off", list: "llm-models" });
  const suggestions = h("datalist", { id: "llm-models" });
  // The models litellm knows, grouped by provider, the most used first; a choice fills the field.
  const picker = h("select", { name: "llm_model_choice", id: "llm-model-choice" },
    h("option", { value: "" }, "Choose from the list…"));
  picker.addEventListener("change", () => {
    if (picker.value) model.value = picker.value;
  });
  const testButton = h("button", { type: "button", onclick: () => testConnection() }, "Test connection");
  const testResult = h("p", { class: "test-result", role: "status", "aria-live": "polite" });
  const secretList = h("ul", { class: "secrets", "aria-label": "Stored secrets" });
  const secretName = h("input", { name: "secret_name", autocomplete: "off", spellcheck: "false",
    pattern: "[A-Za-z_][A-Za-z0-9_]*", placeholder: "GITHUB_TOKEN" });
  const secretValue = h("input", { name: "secret_value", type: "password", autocomplete: "new-password" });
  const addSecret = h("button", { type: "button", onclick: () => saveSecret() }, "Add secret");
  const baseUrl = h("input", { name: "llm_base_url", type: "url", placeholder: "https://api.openai.com/v1", autocomplete: "off" });
  const apiKey = h("input", { name: "llm_api_key", type: "password", autocomplete: "new-password" });
  const keyState = h("span", { class: "muted" });
  const clearKey = h("input", { type: "checkbox", name: "clear_key" });
  const stream = h("input", { type: "checkbox", name: "llm_stream", id: "llm-stream" });
  const tools = TOOL_WORDS.map(([value, label]) => {
    const input = h("input", { type: "checkbox", name: "default_tools", value, id: `t-${value}` });
    return [input, h("div", { class: "choice" }, input, h("label", { for: input.id }, label))];
  });
  const network = networkFieldset(null, { hint: "What new sandboxes may connect to. A sandbox's "
    + "own can be changed on the Sandboxes page, at once." });
  const limitErrors = [];
  const limitField = (label, input, hint) => {
    const error = h("p", { class: "field-error", id: `${input.name}-error`, "aria-live": "polite" });
    const box = field(label, input, hint);
    input.setAttribute("aria-describedby", `${input.getAttribute("aria-describedby") || ""} ${error.id}`.trim());
    limitErrors.push([input, error]);
    box.append(error);
    return box;
  };
  const budget = h("input", { name: "llm_daily_budget_usd", type: "number", min: "0.01", step: "any",
    inputmode: "decimal", placeholder: "No budget", autocomplete: "off" });
  const perMinute = h("input", { name: "llm_requests_per_minute", type: "number", min: "1", step: "1",
    inputmode: "numeric", placeholder: "No limit", autocomplete: "off" });
  const usage = h("p", { class: "usage", "aria-live": "polite" }, "Reading today's use…");
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
      field("Model", model, "Type to see the models litellm knows, e.g. anthropic/claude-sonnet-4-5."), suggestions,
      field("Models by provider", picker, "The most used first, then each provider's."),
      field("Base URL", baseUrl, "Optional."),
      field("API key", apiKey, "Write-only: it is stored encrypted and never shown again. Leave empty to keep it."),
      keyState,
      h("div", { class: "choice" }, clearKey, h("label", { for: (clearKey.id = "clear-key") }, "Remove the stored key")),
      h("div", { class: "choice" }, stream,
        h("label", { for: stream.id }, "Show the model's text as it is written"),
        h("span", { class: "hint" }, "Streaming: for conversations started from now on.")),
      h("div", { class: "row" }, testButton), testResult),
    h("fieldset", {}, h("legend", {}, "LLM limits"),
      h("p", { class: "hint" }, "For the model calls of all your sandboxes together, through the "
        + "control plane. Empty: no limit of yours (the deployment's, if it sets one, still holds)."),
      h("div", { class: "row" },
        limitField("Daily budget (USD)", budget, "Once spent, calls are refused until midnight UTC."),
        limitField("Requests per minute", perMinute, "Past it, calls are refused until the next minute.")),
      usage),
    h("fieldset", {}, h("legend", {}, "Default tools"), tools.map(([, row]) => row)),
    network,
    h("fieldset", {}, h("legend", {}, "Git author"), field("Name", gitName), field("Email", gitEmail)),
    save);
  const secrets = h("section", { class: "card", "aria-labelledby": "secrets-title" },
    h("h2", { id: "secrets-title" }, "Secrets"),
    h("p", { class: "hint" }, "Given to new conversations as environment variables and masked in what the agent shows. Values are write-only: they are stored encrypted and never shown again."),
    secretList,
    h("div", { class: "row" }, field("Secret name", secretName), field("Secret value", secretValue), addSecret));
  main.append(form, secrets);
  // Nothing can be typed until the stored settings are in the form: filling it must not
  // overwrite what someone already typed.
  const controls = [...form.elements];
  const enable = (on) => { for (const control of controls) control.disabled = !on; };
  enable(false);

  // The stored settings into the form: what it shows until someone types.
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
    fillNetwork(network, settings.network_policy);
    budget.value = settings.llm_daily_budget_usd ?? "";
    perMinute.value = settings.llm_requests_per_minute ?? "";
  }

  function showSecrets(names) {
    clear(secretList);
    if (!names.length) secretList.append(h("li", { class: "muted" }, "No secrets stored."));
    for (const name of names) {
      secretList.append(h("li", {}, h("code", {}, name), " ", h("span", { class: "muted" }, "(value hidden)"), " ",
        h("button", { type: "button", class: "link", "aria-label": `Remove ${name}`, onclick: () => patchSecrets({ [name]: null }, `Secret ${name} removed.`) }, "Remove")));
    }
  }

  // "Test connection"'s line: testing, what the check answered, or why it could not run.
  function showTest(test) {
    if (test.testing) {
      testResult.className = "test-result";
      testResult.textContent = "Testing…";
    } else if (test.error !== undefined) {
      testResult.className = "test-result error";
      testResult.textContent = `Could not test: ${test.error}`;
    } else if (test.result.ok) {
      testResult.className = "test-result ok";
      testResult.textContent = `Connected: ${test.result.model} answered.`;
    } else {
      const known = explain(test.result.detail);
      testResult.className = "test-result error";
      testResult.textContent = known ? `${known.words} ` : "The model could not be reached. ";
      testResult.append(h("span", { class: "muted" }, test.result.detail));
    }
  }

  // Today's use through the control plane's LLM gateway, and the limits that hold.
  function showUsage(used) {
    if (used.error !== undefined) {
      usage.textContent = `Could not read today's use: ${used.error}`;
      return;
    }
    const today = used.today;
    const count = (n, one) => `${Number(n).toLocaleString()} ${one}${n === 1 ? "" : "s"}`;
    const limits = [
      used.daily_budget_usd === null ? null : `$${Number(used.daily_budget_usd).toFixed(2)} a day`,
      used.requests_per_minute === null ? null : `${count(used.requests_per_minute, "request")} a minute`,
    ].filter(Boolean);
    clear(usage).append(h("strong", {}, "Today (UTC): "),
      `${count(today.requests, "request")}, `,
      `${count(today.prompt_tokens + today.completion_tokens, "token")} `,
      `(${today.prompt_tokens.toLocaleString()} in, ${today.completion_tokens.toLocaleString()} out), `,
      `${cost(today.cost_usd)}. `,
      limits.length ? `Limits that hold (yours, or the deployment's where smaller): ${limits.join(", ")}.`
        : "No limit holds.");
  }

  function render(state, previous) {
    if (state.stored !== previous.stored) fill(state.stored);
    if (state.secretNames !== previous.secretNames) showSecrets(state.secretNames);
    if (state.ready !== previous.ready) enable(state.ready);
    save.disabled = !state.ready || state.saving;
    if (state.test !== previous.test) showTest(state.test);
    testButton.disabled = !state.ready || Boolean(state.test?.testing);
    if (state.usage !== previous.usage) showUsage(state.usage);
    if (state.models !== previous.models) {
      const suggested = new Set();
      for (const [provider, names] of modelGroups(state.models)) {
        picker.append(h("optgroup", { label: provider }, names.map((name) => h("option", { value: name }, name))));
        for (const name of names) {
          if (suggested.has(name)) continue;
          suggested.add(name);
          suggestions.append(h("option", { value: name, label: provider }));
        }
      }
    }
  }

  const page = createStore(initialState, update, render);

  async function patchSecrets(secretsChange, done) {
    try {
      const saved = await api("/settings", { method: "PATCH", body: { secrets: secretsChange } });
      page.dispatch({ type: "secrets", names: saved.secret_names || [] });
      notify(done);
      return true;
    } catch (error) {
      notify(`Could not save the secret: ${error.message}`, "error");
      return false;
    }
  }

  async function saveSecret() {
    const name = secretName.value.trim();
    if (!name || !secretValue.value || !secretName.checkValidity()) {
      notify("A secret needs a name (letters, digits and _) and a value.", "error");
      return;
    }
    if (await patchSecrets({ [name]: secretValue.value }, `Secret ${name} saved.`)) {
      secretName.value = "";
      secretValue.value = "";
    }
  }

  // Tries the form's model, base URL and (typed or stored) key with one short call.
  async function testConnection() {
    const body = {};
    if (model.value.trim()) body.llm_model = model.value.trim();
    if (baseUrl.value.trim()) body.llm_base_url = baseUrl.value.trim();
    else body.llm_base_url = null;
    if (apiKey.value) body.llm_api_key = apiKey.value;
    page.dispatch({ type: "test", test: { testing: true } });
    let test;
    try {
      test = { result: await api("/settings/llm-check", { method: "POST", body }) };
    } catch (error) {
      test = { error: error.message };
    }
    page.dispatch({ type: "test", test });
  }

  async function readUsage() {
    let used;
    try {
      used = await api("/llm-usage", { query: { days: 1 } });
    } catch (error) {
      used = { error: error.message };
    }
    page.dispatch({ type: "usage", usage: used });
  }

  // A 422's problems with the limits, next to their fields; whether there were any.
  function showLimitProblems(error) {
    let any = false;
    for (const [input, box] of limitErrors) {
      const found = error ? problemsAt(error, ["body", input.name]).map((p) => p.msg) : [];
      box.textContent = found.join("\n");
      if (found.length) input.setAttribute("aria-invalid", "true");
      else input.removeAttribute("aria-invalid");
      any ||= found.length > 0;
    }
    return any;
  }

  const number = (input) => (input.value.trim() === "" ? null : Number(input.value));

  readUsage();
  api("/settings/llm-models").then((found) => page.dispatch({ type: "models", models: found.models }))
    .catch(() => {});

  api("/settings").then((settings) => page.dispatch({ type: "stored", settings })).catch((error) => {
    page.dispatch({ type: "unreadable" });
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
      network_policy: readNetwork(network),
      llm_daily_budget_usd: number(budget),
      llm_requests_per_minute: number(perMinute),
    };
    if (!body.grouping_strategy) delete body.grouping_strategy;
    if (apiKey.value) body.llm_api_key = apiKey.value;
    else if (clearKey.checked) body.llm_api_key = null;
    page.dispatch({ type: "saving" });
    showProblems(network, null, []);
    showLimitProblems(null);
    try {
      page.dispatch({ type: "stored", settings: await api("/settings", { method: "PATCH", body }) });
      notify("Settings saved.");
      readUsage();
    } catch (error) {
      const marked = [showLimitProblems(error), showProblems(network, error, ["body", "network_policy"])];
      notify(marked.some(Boolean) ? "Nothing was saved: a value was refused (said next to its field)."
        : `Could not save: ${error.message}`, "error");
    } finally {
      page.dispatch({ type: "saved" });
    }
  });
  return null;
}
