// The console's shell: sign in, navigation and the page of the address's #fragment.
import { api, ApiError, session } from "./api.js";
import { clear, field, h, notify } from "./dom.js";
import { conversationsPage } from "./conversations.js";
import { conversationPage } from "./conversation.js";
import { sandboxesPage } from "./sandboxes.js";
import { settingsPage } from "./settings.js";
import { startPage } from "./start.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
let leave = null; // the current page's clean-up (live streams, timers)

function signInPage() {
  const input = h("input", { type: "password", name: "api-key", autocomplete: "off", required: true,
    spellcheck: "false" });
  const error = h("p", { class: "error", role: "alert" });
  const form = h("form", { class: "card narrow", "aria-labelledby": "sign-in-title" },
    h("h1", { id: "sign-in-title" }, "Sign in"),
    field("Account key", input, "Kept in this tab only (session storage) and sent as the Bearer header."),
    error,
    h("button", { type: "submit" }, "Sign in"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    session.signIn(input.value.trim());
    try {
      await api("/settings", { quiet: true });
      input.value = "";
      if (!location.hash || location.hash === "#/sign-in") location.hash = "#/conversations";
      else route();
    } catch (failure) {
      session.signOut();
      error.textContent = failure instanceof ApiError && failure.status === 401
        ? "That key is not known." : `Could not sign in: ${failure.message}`;
    }
  });
  main.append(form);
  input.focus();
  return null;
}

const PAGES = [
  [/^#\/conversations\/([0-9a-f-]{36})$/, (m) => conversationPage(main, m[1]), "conversations"],
  [/^#\/conversations$/, () => conversationsPage(main), "conversations"],
  [/^#\/start\/([0-9a-f-]{32,36})$/, (m) => startPage(main, m[1]), "conversations"],
  [/^#\/sandboxes$/, () => sandboxesPage(main), "sandboxes"],
  [/^#\/settings$/, () => settingsPage(main), "settings"],
];

function route() {
  leave?.();
  leave = null;
  clear(main);
  notify("");
  if (!session.key()) {
    nav.hidden = true;
    document.title = "Sign in · Agent console";
    leave = signInPage();
    return;
  }
  nav.hidden = false;
  const hash = location.hash || "#/conversations";
  for (const [pattern, show, section] of PAGES) {
    const match = pattern.exec(hash);
    if (!match) continue;
    for (const link of nav.querySelectorAll("a")) {
      if (link.dataset.page === section) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
    leave = show(match);
    main.focus({ preventScroll: true });
    return;
  }
  location.hash = "#/conversations";
}

document.getElementById("sign-out").addEventListener("click", () => {
  session.signOut();
  location.hash = "#/sign-in";
  route();
});

window.addEventListener("console:unauthorized", () => {
  session.signOut();
  route();
  notify("Your key was refused: sign in again.", "error");
});
window.addEventListener("hashchange", route);
route();
