// A sandbox's egress policy ({mode, allow}) for a person: in words, and as the fieldset that edits
// it, which the settings page (the default of new sandboxes) and each sandbox's card share. The
// control plane checks the rules: a bad one comes back as a 422, shown under the rules' field.
import { clear, h } from "./dom.js";
import { problemsAt } from "./errors.js";

const MODES = [
  ["open", "Internet", "The public internet; never this host, private ranges or other sandboxes."],
  ["allowlist", "Only the hosts listed", "Over TCP only; names resolve only when they are listed."],
  ["none", "No network", "Nothing beyond the control plane (its LLM gateway and webhook)."],
];
const FORMS = "One per line: a name (pypi.org), its subdomains (*.github.com), or an IPv4 address or "
  + "network (203.0.113.0/24); with ports or without (pypi.org:443, 203.0.113.7:22,443).";

const parts = new WeakMap(); // fieldset -> its controls
let made = 0;

// "Internet (…)", "Only: pypi.org:443, *.github.com", "No network beyond the control plane".
export function policyWords(policy) {
  const mode = policy?.mode || "open";
  if (mode === "none") return "No network beyond the control plane";
  if (mode === "allowlist") {
    const allow = policy.allow || [];
    return allow.length ? `Only: ${allow.join(", ")}` : "Only the hosts listed (none yet: no network)";
  }
  return "Internet (not this host, private ranges or other sandboxes)";
}

// "tcp 10.0.0.5:5432, 3 s ago": one refused destination of GET /sandboxes/{id}/network.
export function refusalLine(refusal) {
  const ago = refusal.seconds_ago < 60 ? `${refusal.seconds_ago} s` : `${Math.round(refusal.seconds_ago / 60)} min`;
  return `${refusal.protocol} ${refusal.address}:${refusal.port}, ${ago} ago`;
}

// The fieldset editing a policy: the three modes, and the rules' field shown for "allowlist".
export function networkFieldset(policy, { legend = "Network", hint = null } = {}) {
  made += 1;
  const id = `net-${made}`;
  const radios = MODES.map(([mode, label, words]) => {
    const input = h("input", { type: "radio", name: `${id}-mode`, value: mode, id: `${id}-${mode}`,
      "aria-describedby": `${id}-${mode}-hint` });
    input.addEventListener("change", () => showRules());
    return [input, h("div", { class: "choice" }, input, h("label", { for: input.id }, label),
      h("span", { class: "hint", id: `${id}-${mode}-hint` }, words))];
  });
  const rules = h("textarea", { id: `${id}-allow`, name: "allow", rows: 4, spellcheck: "false",
    autocomplete: "off", autocapitalize: "off", "aria-describedby": `${id}-allow-hint ${id}-allow-error`,
    placeholder: "pypi.org:443\n*.github.com" });
  const rulesError = h("p", { class: "field-error", id: `${id}-allow-error`, "aria-live": "polite" });
  const rulesBox = h("div", { class: "field rules" },
    h("label", { for: rules.id }, "Allowed hosts"), rules,
    h("p", { class: "hint", id: `${id}-allow-hint` }, FORMS), rulesError);
  const otherError = h("p", { class: "field-error", "aria-live": "polite" });
  const fieldset = h("fieldset", { class: "network" }, h("legend", {}, legend),
    hint ? h("p", { class: "hint" }, hint) : null,
    radios.map(([, row]) => row), rulesBox, otherError);

  function showRules() {
    rulesBox.hidden = !radios.find(([input]) => input.checked && input.value === "allowlist")
      && !rulesError.textContent;
  }
  parts.set(fieldset, { radios, rules, rulesError, otherError, showRules });
  fillNetwork(fieldset, policy);
  return fieldset;
}

// The policy as the fieldset holds it (the rules are kept whatever the mode, as the API keeps them).
export function readNetwork(fieldset) {
  const { radios, rules } = parts.get(fieldset);
  return {
    mode: radios.find(([input]) => input.checked)?.[0].value || "open",
    allow: rules.value.split("\n").map((line) => line.trim()).filter(Boolean),
  };
}

export function fillNetwork(fieldset, policy) {
  const { radios, rules } = parts.get(fieldset);
  const mode = policy?.mode || "open";
  for (const [input] of radios) input.checked = input.value === mode;
  rules.value = (policy?.allow || []).join("\n");
  showProblems(fieldset, null, []);
}

// Shows the problems a failed save found in the policy (`error` an ApiError, `prefix` where the
// request held the policy, e.g. ["body", "network_policy"]) next to the field; none clears them.
// Whether there were any.
export function showProblems(fieldset, error, prefix) {
  const { rules, rulesError, otherError, showRules } = parts.get(fieldset);
  const sent = readNetwork(fieldset).allow;
  const onRules = [];
  const other = [];
  for (const { at, msg } of error ? problemsAt(error, prefix) : []) {
    if (at[0] !== "allow") {
      other.push(msg);
      continue;
    }
    // The rule by its text (a message that names it already is left as it is).
    const rule = typeof at[1] === "number" ? sent[at[1]] : null;
    onRules.push(rule && !msg.includes(rule) ? `${rule}: ${msg}` : msg);
  }
  clear(rulesError).append(onRules.join("\n"));
  clear(otherError).append(other.join("\n"));
  if (onRules.length) rules.setAttribute("aria-invalid", "true");
  else rules.removeAttribute("aria-invalid");
  showRules();
  if (onRules.length) rules.focus();
  return onRules.length + other.length > 0;
}
