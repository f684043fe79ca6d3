// A conversation's workspace, folded above its transcript: the files (browse, read, download),
// the changes of this run (from its own file edits, so they show without Git too), the Git
// changes with a file's diff, and the terminal's history. Files are read through /api/v1 and
// shown as text.
import { api, download } from "./api.js";
import { badge, clear, h, notify } from "./dom.js";
import { diffView } from "./actions.js";

const MAX_SHOWN = 200_000; // characters of a file shown on the page; the download has all

export function workspacePanel(id, log) {
  const body = h("div", { class: "workspace-body" });
  const view = h("section", { class: "viewer", "aria-label": "File", hidden: true });
  let cwd = "";

  // A new view of the panel: the file or diff shown before goes.
  function fresh() {
    clear(view).hidden = true;
    return clear(body);
  }

  function showView(title, ...content) {
    clear(view).append(h("h3", {}, title), ...content);
    view.hidden = false;
    view.scrollIntoView({ block: "nearest" });
  }

  async function files(path = cwd) {
    try {
      const listing = await api(`/app-conversations/${id}/files`, { query: { path: path || undefined } });
      cwd = listing.path === "." ? "" : listing.path;
      const up = cwd ? cwd.split("/").slice(0, -1).join("/") : null;
      fresh().append(h("p", { class: "muted" }, `Files in /${cwd}`),
        h("ul", { class: "files", "aria-label": "Files" },
          up !== null ? h("li", {}, h("button", { type: "button", class: "link", onclick: () => files(up) }, "..")) : null,
          listing.entries.map((e) => h("li", { dataset: { kind: e.is_dir ? "dir" : "file" } },
            h("button", { type: "button", class: "link", onclick: () => (e.is_dir ? files(e.path) : open(e.path)) },
              e.is_dir ? `${e.name}/` : e.name),
            e.is_dir ? null : h("span", { class: "muted" }, ` ${size(e.size)}`))),
          listing.truncated ? h("li", { class: "muted" }, "… more entries not shown") : null),
        view);
    } catch (error) {
      notify(`Could not list the files: ${error.message}`, "error");
    }
  }

  async function open(path) {
    try {
      const text = await api(`/app-conversations/${id}/file`, { query: { path }, text: true });
      showView(path,
        h("button", { type: "button", onclick: () => save(path) }, `Download ${path.split("/").pop()}`),
        h("pre", { class: "file-text", tabindex: "0" }, text.length > MAX_SHOWN ? `${text.slice(0, MAX_SHOWN)}\n…` : text));
    } catch (error) {
      notify(`Could not read ${path}: ${error.message}`, "error");
    }
  }

  async function save(path) {
    try {
      const name = await download(`/app-conversations/${id}/file?path=${encodeURIComponent(path)}`, path.split("/").pop());
      notify(`Downloaded ${name}`);
    } catch (error) {
      notify(`Could not download ${path}: ${error.message}`, "error");
    }
  }

  function runChanges() {
    const edits = [...log.edits.entries()];
    fresh().append(edits.length
      ? h("ul", { class: "changes", "aria-label": "Changes of this run" }, edits.map(([path, edit]) =>
        h("li", {}, h("button", { type: "button", class: "link", onclick: () =>
          showView(`Changes to ${log.relPath(path)}`, diffView(edit.before ?? "", edit.after ?? "")) }, log.relPath(path)),
        " ", badge(edit.before === null ? "added" : "updated"))))
      : h("p", { class: "muted" }, "The agent has not edited a file with its file editor yet."), view);
  }

  async function gitChanges() {
    try {
      const response = await fetchChanges();
      fresh();
      if (response.found.length) {
        body.append(h("ul", { class: "changes", "aria-label": "Changed files" }, response.found.map((change) =>
          h("li", {}, h("button", { type: "button", class: "link", onclick: () => gitDiff(change.path) }, change.path),
            " ", badge(change.status)))));
      } else {
        body.append(h("p", { class: "muted" }, response.why || "No changes."));
      }
      body.append(view);
    } catch (error) {
      notify(`Could not read the changes: ${error.message}`, "error");
    }
  }

  // The list, and why it is empty when the workspace holds no repository (the agent server
  // says so in a header, the body staying a plain list).
  async function fetchChanges() {
    const found = await api(`/app-conversations/${id}/git/changes`);
    if (found.length) return { found };
    const edits = log.edits.size;
    return { found, why: edits
      ? `Git shows no changes (the workspace may not be a Git repository): see "Changes of this run" for the ${edits} file(s) the agent edited.`
      : "No changes." };
  }

  async function gitDiff(path) {
    try {
      const diff = await api(`/app-conversations/${id}/git/diff`, { query: { path } });
      showView(`Diff of ${diff.path}`, diffView(diff.original, diff.modified));
    } catch (error) {
      notify(`Could not read the diff: ${error.message}`, "error");
    }
  }

  function terminal() {
    fresh().append(log.commands.length
      ? h("ol", { class: "history", "aria-label": "Terminal history" }, log.commands.map((c) =>
        h("li", {}, h("code", {}, `$ ${c.command}`), " ",
          h("span", { class: `exit ${c.exit === 0 ? "ok" : "bad"}` }, c.exit === null ? "" : `exit ${c.exit}`))))
      : h("p", { class: "muted" }, "No command has run yet."), view);
  }

  const buttons = [
    h("button", { type: "button", onclick: () => files("") }, "Files"),
    h("button", { type: "button", onclick: runChanges }, "Changes of this run"),
    h("button", { type: "button", onclick: gitChanges }, "Show Git changes"),
    h("button", { type: "button", onclick: terminal }, "Terminal history"),
  ];
  const panel = h("details", { class: "card workspace" },
    h("summary", {}, h("h2", { id: "work-title" }, "Workspace")),
    h("div", { class: "row", role: "group", "aria-label": "Workspace views" }, buttons), body);
  return { panel, buttons };
}

function size(bytes) {
  if (typeof bytes !== "number") return "";
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}
