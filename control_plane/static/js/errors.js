// Errors in words: what went wrong and the setting that fixes it, from the text litellm or the
// control plane gives ("litellm.InternalServerError: ... All connection attempts failed"). The
// original text stays one click away.
import { h } from "./dom.js";

const LLM = "#/settings";

const KNOWN = [
  [/connection attempts failed|connect(ion)? ?(error|refused)|name or service not known|getaddrinfo|nodename nor servname|temporary failure in name resolution|no route to host|network is unreachable/i,
    "The language model could not be reached: nothing answered at its base URL.", "Check the Base URL in Settings"],
  [/authentication|invalid.{0,20}api.?key|incorrect api key|\b401\b|unauthori[sz]ed/i,
    "The language model refused the API key.", "Set the API key in Settings"],
  [/no llm|llm_model|no model is set|model is not set|not configured/i,
    "No language model is set.", "Choose a model in Settings"],
  [/notfounderror|model.{0,40}(not found|does not exist)|\b404\b|llm provider not provided|provider list/i,
    "The provider does not know this model (or the base URL is not an OpenAI-compatible API).", "Check the model name in Settings"],
  [/ratelimit|rate limit|\b429\b|quota/i,
    "The provider's rate limit or quota was reached; wait a little or check your plan.", null],
  [/context ?window|context length|maximum context|too many tokens/i,
    "The conversation grew longer than the model's context window.", null],
  [/timeout|timed out/i,
    "The language model did not answer in time.", "Check the Base URL in Settings"],
];

// {words, fix} for a text, or null when it is not one we can put in words.
export function explain(text) {
  const said = String(text ?? "");
  for (const [pattern, words, fix] of KNOWN) {
    if (pattern.test(said)) return { words, fix };
  }
  return null;
}

// The error as page elements: the words, a link to the setting, the original text folded.
export function errorParts(text) {
  const known = explain(text);
  if (!known) return [h("pre", { class: "output", tabindex: "0" }, String(text ?? ""))];
  return [
    h("p", { class: "text plain-error" }, known.words, known.fix ? " " : null,
      known.fix ? h("a", { href: LLM, class: "fix" }, known.fix) : null),
    h("details", { class: "raw" }, h("summary", {}, "What the system said"), h("pre", { class: "raw-json", tabindex: "0" }, String(text))),
  ];
}

// A 422's problems at one place of the request, for the form that sent it: [{at, msg}] for each
// `detail` entry whose loc starts with `prefix` (["body", "network_policy"]), `at` the rest of its
// loc (["allow", 1]) and `msg` without pydantic's "Value error, ". Empty for any other failure.
export function problemsAt(error, prefix) {
  const detail = error?.status === 422 && Array.isArray(error.detail) ? error.detail : [];
  return detail
    .filter((d) => Array.isArray(d.loc) && prefix.every((part, i) => d.loc[i] === part))
    .map((d) => ({ at: d.loc.slice(prefix.length), msg: String(d.msg ?? "").replace(/^Value error, /, "") }));
}
