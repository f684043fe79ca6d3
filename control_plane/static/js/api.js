// The console's only way to the control plane: /api/v1 with the account key as a Bearer header.
// The key lives in this tab's session storage; it is never put in a URL or a cookie.

const KEY = "control-plane.api-key";

export const session = {
  key: () => sessionStorage.getItem(KEY),
  signIn: (key) => sessionStorage.setItem(KEY, key),
  signOut: () => sessionStorage.clear(), // the key, and anything else of this user's
};

export class ApiError extends Error {
  constructor(status, detail) {
    super(typeof detail === "string" ? detail : describe(detail));
    this.status = status;
    this.detail = detail;
  }
}

// A 422's detail is a list of {loc, msg}: one readable line.
function describe(detail) {
  if (Array.isArray(detail)) {
    return detail.map((d) => `${(d.loc || []).slice(1).join(".")}: ${d.msg}`).join("; ");
  }
  return JSON.stringify(detail);
}

function url(path, query) {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") params.append(name, value);
  }
  const text = params.toString();
  return `/api/v1${path}${text ? `?${text}` : ""}`;
}

function headers(extra) {
  return { Authorization: `Bearer ${session.key() || ""}`, ...extra };
}

async function failure(response, quiet = false) {
  let detail = response.statusText;
  try {
    detail = (await response.json()).detail ?? detail;
  } catch {
    // not JSON: the status text says it
  }
  if (response.status === 401 && !quiet) window.dispatchEvent(new CustomEvent("console:unauthorized"));
  return new ApiError(response.status, detail);
}

// JSON in, JSON out (`text`: the body as text, whatever its type); throws ApiError with the
// control plane's detail. A 401 signs out (but for `quiet` calls: the sign-in's own check).
export async function api(path, { method = "GET", query, body, quiet = false, text = false } = {}) {
  const response = await fetch(url(path, query), {
    method,
    headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }),
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
  });
  if (!response.ok) throw await failure(response, quiet);
  const type = response.headers.get("content-type") || "";
  return type.includes("json") && !text ? response.json() : response.text();
}

// A download through fetch (the key stays in a header), saved under its own file name.
export async function download(path, fallbackName) {
  const response = await fetch(url(path), { headers: headers(), cache: "no-store" });
  if (!response.ok) throw await failure(response);
  const blob = await response.blob();
  const disposition = response.headers.get("content-disposition") || "";
  const name = /filename="([^"]+)"/.exec(disposition)?.[1] || fallbackName;
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
  return name;
}

// Follows /conversation/{id}/events/stream (server-sent events read through fetch, since
// EventSource cannot send a header). Reconnects after a drop, resuming after the last id seen.
// Stored events go to onEvent; streaming text (`event: delta`, no id: live only) to onDelta.
// Returns a function that stops it.
export function follow(conversationId, { onEvent, onDelta, onState, onGone }) {
  const controller = new AbortController();
  let lastId = null;
  let stopped = false;

  async function once() {
    const extra = lastId ? { "Last-Event-ID": lastId } : {};
    const response = await fetch(url(`/conversation/${conversationId}/events/stream`), {
      headers: headers({ Accept: "text/event-stream", ...extra }),
      signal: controller.signal,
      cache: "no-store",
    });
    if (!response.ok) throw await failure(response);
    onState?.("live");
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const frame = { id: null, event: "message", data: [] };
        for (const line of block.split("\n")) {
          if (line.startsWith(":")) continue;
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "id") frame.id = text;
          else if (field === "event") frame.event = text;
          else if (field === "data") frame.data.push(text);
        }
        if (frame.event === "gone") {
          stopped = true;
          onGone?.();
          return;
        }
        if (!frame.data.length) continue;
        // A page's failure to draw one event is said (the console's errors) and the stream
        // goes on: it is not the connection's.
        try {
          if (frame.event === "delta") {
            onDelta?.(JSON.parse(frame.data.join("\n")));
            continue;
          }
          if (frame.id) lastId = frame.id;
          onEvent(JSON.parse(frame.data.join("\n")));
        } catch (error) {
          console.error("could not show an event:", error);
        }
      }
    }
  }

  (async () => {
    let delay = 500;
    while (!stopped) {
      try {
        await once();
        delay = 500;
      } catch (error) {
        if (stopped || error.name === "AbortError") return;
        if (error instanceof ApiError && error.status < 500) {
          onState?.(`stopped: ${error.message}`);
          return;
        }
      }
      if (stopped) return;
      onState?.("reconnecting");
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 10_000);
    }
  })();

  return () => {
    stopped = true;
    controller.abort();
  };
}
