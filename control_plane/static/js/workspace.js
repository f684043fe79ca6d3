// A conversation's workspace, a panel beside its chat with tabs, as OpenHands has it:
// - Changes: the files this run edited (from the file editor's own before and after, so they
//   show without Git) and the Git changes, each with its diff;
// - Files: the sandbox's whole workspace (every conversation's directory in it), opened at
//   this conversation's directory: browse, read, download;
// - Terminal: the agent's commands and their output as it streams (the transient path), then
//   their exit status;
// - Browser: the agent's browser as it last was (its screenshot and URL);
// - App: the web app the agent serves in its sandbox on a port, through a link the control
//   plane makes for it (`/sandbox-apps/…`, a sandboxed document: it cannot reach this page or
//   its key), in the panel and in a new tab.
// The tabs, the terminal, the browser and the app link are the panel's state (panel.js, one
// way through store.js); Files and Changes are read when shown. Everything is text.
import { api, download } from "./api.js";
import { append, badge, clear, h, notify } from "./dom.js";
import { diffView } from "./actions.js";
import { createStore } from "./store.js";
import { DEFAULT_APP_PORT, TABS, eventActions, panelState, panelUpdate } from "./panel.js";

const MAX_SHOWN = 200_000; // characters of a file shown on the page; the download has all

export function workspacePanel(id, log) {
  const body = h("div", { class: "tab-body", id: "work-tab", role: "tabpanel", tabindex: "0" });
  const view = h("section", { class: "viewer", "aria-label": "File", hidden: true });
  let sandboxId = null;
  let cwd = null; // the Files tab's directory, relative to the sandbox's workspace

  const tabs = TABS.map(([key, word]) => h("button", { type: "button", role: "tab", id: `tab-${key}`,
    "aria-controls": "work-tab", "aria-selected": "false", dataset: { tab: key },
    onclick: () => store.dispatch({ type: "tab", tab: key }) }, word));

  function fresh() {
    clear(view).hidden = true;
    return clear(body);
  }

  function showView(title, ...content) {
    clear(view).append(h("h3", {}, title), ...content);
    view.hidden = false;
    view.scrollIntoView({ block: "nearest" });
  }

  // -- Files: the sandbox's whole workspace ----------------------------------------------------

  async function files(path) {
    try {
      const listing = await api(`/app-conversations/${id}/files`, { query: { path: path || undefined, scope: "sandbox" } });
      cwd = listing.path === "." ? "" : listing.path;
      const up = cwd ? cwd.split("/").slice(0, -1).join("/") : null;
      fresh().append(h("p", { class: "muted" }, `Files in /${cwd} (the sandbox's workspace)`),
        h("ul", { class: "files", "aria-label": "Files" },
          up !== null ? h("li", {}, h("button", { type: "button", class: "link", onclick: () => files(up) }, "..")) : null,
          listing.entries.map((e) => h("li", { dataset: { kind: e.is_dir ? "dir" : "file" } },
            h("button", { type: "button", class: "link", onclick: () => (e.is_dir ? files(e.path) : open(e.path)) },
              e.is_dir ? `${e.name}/` : e.name),
            e.is_dir ? null : h("span", { class: "muted" }, ` ${size(e.size)}`))),
          listing.truncated ? h("li", { class: "muted" }, "… more entries not shown") : null),
        view);
    } catch (error) {
      if (path && cwd === null) return files(""); // its directory is not where it was thought
      notify(`Could not list the files: ${error.message}`, "error");
    }
  }

  // Where the Files tab opens: this conversation's directory, a child of the sandbox's
  // workspace (its last segment), or the workspace itself when that is not known.
  function home() {
    const dir = (log.workingDir || "").replace(/\/+$/, "");
    return dir ? dir.split("/").pop() : "";
  }

  async function open(path) {
    try {
      const text = await api(`/app-conversations/${id}/file`, { query: { path, scope: "sandbox" }, text: true });
      showView(path,
        h("button", { type: "button", onclick: () => save(path) }, `Download ${path.split("/").pop()}`),
        h("pre", { class: "file-text", tabindex: "0" }, text.length > MAX_SHOWN ? `${text.slice(0, MAX_SHOWN)}\n…` : text));
    } catch (error) {
      notify(`Could not read ${path}: ${error.message}`, "error");
    }
  }

  async function save(path) {
    try {
      const query = `path=${encodeURIComponent(path)}&scope=sandbox`;
      const name = await download(`/app-conversations/${id}/file?${query}`, path.split("/").pop());
      notify(`Downloaded ${name}`);
    } catch (error) {
      notify(`Could not download ${path}: ${error.message}`, "error");
    }
  }

  // -- Changes: this run's edits, then Git's ---------------------------------------------------

  const gitButton = h("button", { type: "button", onclick: () => gitChanges() }, "Show Git changes");
  const git = h("div", { class: "git" });

  function changes() {
    const edits = [...log.edits.entries()];
    clear(git);
    fresh().append(h("h3", {}, "Changes of this run"), edits.length
      ? h("ul", { class: "changes", "aria-label": "Changes of this run" }, edits.map(([path, edit]) =>
        h("li", {}, h("button", { type: "button", class: "link", onclick: () =>
          showView(`Changes to ${log.relPath(path)}`, diffView(edit.before ?? "", edit.after ?? "")) }, log.relPath(path)),
        " ", badge(edit.before === null ? "added" : "updated"))))
      : h("p", { class: "muted" }, "The agent has not edited a file with its file editor yet."),
    h("h3", {}, "Git changes"), gitButton, git, view);
  }

  // Read when asked: a read of the workspace resumes a paused sandbox.
  async function gitChanges() {
    try {
      const found = await api(`/app-conversations/${id}/git/changes`);
      clear(git).append(found.length
        ? h("ul", { class: "changes", "aria-label": "Changed files" }, found.map((change) =>
          h("li", {}, h("button", { type: "button", class: "link", onclick: () => gitDiff(change.path) }, change.path),
            " ", badge(change.status))))
        : h("p", { class: "muted" }, log.edits.size
          ? "Git shows no changes (the workspace may not be a Git repository): the run's edits are above."
          : "No changes."));
    } catch (error) {
      notify(`Could not read the changes: ${error.message}`, "error");
    }
  }

  async function gitDiff(path) {
    try {
      const diff = await api(`/app-conversations/${id}/git/diff`, { query: { path } });
      showView(`Diff of ${diff.path}`, diffView(diff.original, diff.modified));
    } catch (error) {
      notify(`Could not read the diff: ${error.message}`, "error");
    }
  }

  // -- Terminal, Browser, App: drawn from the state --------------------------------------------

  const shownCommands = new Map(); // command id -> its element, kept while the tab is shown
  function terminal(state) {
    if (!body.querySelector(".terminal")) {
      shownCommands.clear();
      fresh().append(h("ol", { class: "terminal", "aria-label": "Terminal", "aria-live": "off" }),
        h("p", { class: "muted empty" }, "No command has run yet."));
    }
    const list = body.querySelector(".terminal");
    body.querySelector(".empty").hidden = state.terminal.length > 0;
    for (const c of state.terminal) {
      let item = shownCommands.get(c.id);
      if (!item) {
        item = h("li", { dataset: { callId: c.id } }, h("div", { class: "line" }, h("code", { class: "command" }),
          " ", h("span", { class: "exit" })), h("pre", { class: "term-output", tabindex: "0" }));
        shownCommands.set(c.id, item);
        list.append(item);
      }
      if (item.dataset.drawn === JSON.stringify([c.output.length, c.exit, c.running, c.command])) continue;
      item.dataset.drawn = JSON.stringify([c.output.length, c.exit, c.running, c.command]);
      item.querySelector(".command").textContent = `$ ${c.command}`;
      const exit = item.querySelector(".exit");
      exit.className = `exit ${c.running ? "running" : c.exit === 0 ? "ok" : "bad"}`;
      exit.textContent = c.running ? "running…" : c.exit === null ? "" : `exit ${c.exit}`;
      const out = item.querySelector(".term-output");
      const follow = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
      out.textContent = c.output;
      out.hidden = !c.output;
      if (follow) out.scrollTop = out.scrollHeight;
    }
    if (state.terminal.some((c, i) => list.children[i]?.dataset.callId !== c.id)) {
      list.append(...state.terminal.map((c) => shownCommands.get(c.id))); // in the calls' order
    }
  }

  function browser(state) {
    const b = state.browser;
    fresh().append(b
      ? h("div", { class: "browser" },
        h("p", {}, "URL: ", h("code", { class: "browser-url" }, b.url || "(unknown)")),
        b.shot ? h("img", { src: b.shot, alt: "The agent's browser, as it last was", class: "screenshot" })
          : h("p", { class: "muted" }, "No screenshot yet (the model may not read images)."))
      : h("p", { class: "muted" }, "The agent has not used its browser yet."));
  }

  const portInput = h("input", { type: "number", name: "app-port", min: 1024, max: 65535, required: true,
    value: String(DEFAULT_APP_PORT) });
  const openButton = h("button", { type: "submit" }, "Open");
  const appForm = h("form", { class: "row app-form", "aria-label": "The app's port" },
    h("div", { class: "field" }, h("label", { for: "app-port" }, "Port the agent's app listens on"), portInput),
    openButton);
  portInput.id = "app-port";
  appForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const port = Number(portInput.value);
    store.dispatch({ type: "app-port", port });
    if (!sandboxId) return;
    try {
      const link = await api(`/sandboxes/${sandboxId}/app-url`, { query: { port } });
      store.dispatch({ type: "app-link", link });
    } catch (error) {
      store.dispatch({ type: "app-link", error: error.message });
    }
  });

  function app(state) {
    const { link, error } = state.app;
    append(fresh(), [appForm,
      h("p", { class: "hint" }, "The web app the agent serves in its sandbox (a dev server on a port, on all its addresses), "
        + "opened through this control plane: only you can open its link, for an hour. Its own links work when they are relative."),
      error ? h("p", { class: "error", role: "alert" }, error) : null,
      link ? [h("p", {}, h("a", { href: link.path, target: "_blank", rel: "noopener noreferrer" }, `Open the app on port ${link.port} in a new tab`)),
        h("iframe", { src: link.path, title: `The app on port ${link.port}`, class: "app-frame",
          sandbox: "allow-scripts allow-forms allow-popups allow-modals", referrerpolicy: "no-referrer" })] : null]);
  }

  function render(state, previous) {
    const changed = state.tab !== previous.tab;
    if (changed) {
      for (const tab of tabs) tab.setAttribute("aria-selected", String(tab.dataset.tab === state.tab));
      body.setAttribute("aria-labelledby", `tab-${state.tab}`);
    }
    if (state.tab === "terminal" && (changed || state.terminal !== previous.terminal)) terminal(state);
    else if (state.tab === "browser" && (changed || state.browser !== previous.browser)) browser(state);
    else if (state.tab === "app" && (changed || state.app.link !== previous.app.link || state.app.error !== previous.app.error)) app(state);
    else if (changed && state.tab === "files") files(cwd ?? home());
    else if (changed && state.tab === "changes") changes();
  }

  const store = createStore(panelState, panelUpdate, render);
  const panel = h("aside", { class: "card workspace", "aria-labelledby": "work-title" },
    h("h2", { id: "work-title" }, "Workspace"),
    h("div", { class: "tabs", role: "tablist", "aria-label": "Workspace views" }, tabs), body);
  render(store.state, { ...store.state, tab: null });

  return {
    panel,
    buttons: [tabs[1], gitButton, openButton], // what reaches the sandbox (not when it ended)
    // The live stream's stored events and its transient deltas (a running command's output).
    event(event) {
      for (const action of eventActions(event)) store.dispatch(action);
    },
    delta(delta) {
      if (delta.tool_call_id && delta.output) store.dispatch({ type: "output", id: delta.tool_call_id, output: delta.output });
    },
    // The conversation's sandbox (its apps' links are the sandbox's).
    sandbox(value) {
      sandboxId = value;
    },
  };
}

function size(bytes) {
  if (typeof bytes !== "number") return "";
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}
