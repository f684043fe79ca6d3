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

// A status word as a badge (the word is also its text: colour is never the only cue).
export function badge(value, label) {
  const text = value ? String(value) : "—";
  return h("span", { class: `badge badge-${text.toLowerCase().replace(/[^a-z_]/g, "")}`,
    title: label ? `${label}: ${text}` : null }, text);
}

export function when(value) {
  if (!value) return "—";
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? String(value) : date.toLocaleString();
}

export function timeElement(value) {
  return value ? h("time", { datetime: value }, when(value)) : "—";
}

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
