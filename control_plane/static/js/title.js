// A conversation's title as its page heading, renamed in place: "Rename" turns it into a field;
// Enter saves (PATCH), Escape leaves it as it was.
import { api } from "./api.js";
import { h, notify } from "./dom.js";

export function titleEditor(id, onSaved) {
  let current = "";
  const text = h("span", { class: "title-text" });
  const rename = h("button", { type: "button", class: "link rename" }, "Rename");
  const heading = h("h1", { class: "title" }, text, " ", rename);
  const input = h("input", { name: "title", maxlength: 200, required: true, "aria-label": "Title" });
  const form = h("form", { class: "row title-form", hidden: true },
    input, h("button", { type: "submit" }, "Save"),
    h("button", { type: "button", onclick: () => close() }, "Cancel"));

  function close() {
    form.hidden = true;
    heading.hidden = false;
    rename.focus();
  }

  rename.addEventListener("click", () => {
    input.value = current;
    heading.hidden = true;
    form.hidden = false;
    input.focus();
    input.select();
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Escape") close();
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const title = input.value.trim();
    if (!title) return;
    try {
      const saved = await api(`/app-conversations/${id}`, { method: "PATCH", body: { title } });
      close();
      onSaved(saved);
      notify("Renamed.");
    } catch (error) {
      notify(`Could not rename: ${error.message}`, "error");
    }
  });

  return {
    element: h("div", { class: "title-box" }, heading, form),
    set(title) {
      current = title;
      text.textContent = title;
    },
    editing: () => !form.hidden,
  };
}
