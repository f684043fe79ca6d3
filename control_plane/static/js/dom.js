// Building the page: elements from code, text from data. Nothing here parses HTML: strings
// become text nodes (so an event holding "<script>" shows those characters and runs nothing).

export function h(tag, props = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      element.addEventListener(name.slice(2), value);
    } else if (name === "class") {
      element.className = value;
    } else if (name === "dataset") {
      Object.assign(element.dataset, value);
    } else if (name === "value" || name === "checked" || name === "disabled" || name === "selected") {
      element[name] = value;
    } else {
      element.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(element, children);
  return element;
}

export function append(element, children) {
  for (const child of [children].flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

export function clear(element) {
  element.replaceChildren();
  return element;
}

// A status as a badge: `value` (the wire's, for its colour) shown as `word` (colour is never the
// only cue, and the wire's spelling is never what a person reads).
export function badge(value, label, word) {
  const said = value ? String(value) : "—";
  const text = word || (/^[A-Z_]+$/.test(said) ? said.charAt(0) + said.slice(1).toLowerCase().replace(/_/g, " ") : said);
  return h("span", { class: `badge badge-${String(value || "none").toLowerCase().replace(/[^a-z_]/g, "")}`,
    title: label ? `${label}: ${text}` : null }, text);
}

// A moment in full ("17/03/2026, 14:02:11"): the title of a relative time.
export function when(value) {
  if (!value) return "—";
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? String(value) : date.toLocaleString();
}

// A moment as a person scans it: "just now", "12 s ago", "5 min ago", "3 h ago", "yesterday",
// "4 days ago", then the date. In the future (a pause to come): "in 5 min".
export function relative(value, now = Date.now()) {
  const at = new Date(value).getTime();
  if (Number.isNaN(at)) return String(value);
  const seconds = Math.round((now - at) / 1000);
  const ahead = seconds < 0;
  const s = Math.abs(seconds);
  const said = (text) => (ahead ? `in ${text}` : `${text} ago`);
  if (s < 5) return ahead ? "in a moment" : "just now";
  if (s < 60) return said(`${s} s`);
  if (s < 3600) return said(`${Math.floor(s / 60)} min`);
  if (s < 86_400) return said(`${Math.floor(s / 3600)} h`);
  const days = Math.floor(s / 86_400);
  if (days === 1) return ahead ? "tomorrow" : "yesterday";
  if (days < 7) return said(`${days} days`);
  return new Date(at).toLocaleDateString();
}

// A <time> saying how long ago (the full moment in its title), kept current by one timer.
export function timeElement(value, className) {
  if (!value) return "—";
  return h("time", { datetime: value, title: when(value), class: className ? `rel ${className}` : "rel" },
    relative(value));
}

let ticking = null;
function tick() {
  for (const time of document.querySelectorAll("time.rel")) {
    const text = relative(time.getAttribute("datetime"));
    if (time.textContent !== text) time.textContent = text;
  }
}
if (typeof document !== "undefined" && !ticking) ticking = setInterval(tick, 10_000);

export function cost(value) {
  return `$${Number(value || 0).toFixed(4)}`;
}

// One line in the page's live region (announced to screen readers too), floating at the top of
// the window. `keep`: it survives the next page change (a notice about leaving a page).
let fading = null;
export function notify(text, kind = "info", { keep = false } = {}) {
  const notice = document.getElementById("notice");
  if (!text && notice.dataset.keep) {
    delete notice.dataset.keep;
    return;
  }
  notice.className = `notice notice-${kind}`;
  notice.textContent = text;
  if (keep) notice.dataset.keep = "1";
  else delete notice.dataset.keep;
  clearTimeout(fading);
  if (text && kind !== "error") fading = setTimeout(() => { notice.textContent = ""; }, 15_000);
}

export function field(label, control, hint) {
  const id = control.id || `f-${Math.random().toString(36).slice(2)}`;
  control.id = id;
  const hintId = hint ? `${id}-hint` : null;
  if (hintId) control.setAttribute("aria-describedby", hintId);
  return h("div", { class: "field" },
    h("label", { for: id }, label), control, hint ? h("p", { class: "hint", id: hintId }, hint) : null);
}
