// Why a sandbox is in its status, in words: from a sandbox's status_reason and status_detail,
// or from a `sandbox_status` notice among a conversation's events ({sandbox_id, status, reason,
// detail}). Plain strings: the pages put them in as text.

const WORDS = { STARTING: "Starting", RUNNING: "Running", PAUSED: "Paused", ERROR: "Error", MISSING: "Missing" };

// The reason alone ("idle for 30 min", "the 12-hour limit"), or null when none is known.
export function reasonText(status, reason, detail) {
  switch (reason) {
    case "USER":
      return { PAUSED: "you paused it", RUNNING: "you resumed it", MISSING: "you deleted it" }[status] || "your action";
    case "IDLE":
      return typeof detail === "string" && detail.startsWith("idle for ") ? detail : "idle";
    case "SESSION_CAP":
      return status === "PAUSED" ? "the 12-hour limit" : "after the 12-hour limit";
    case "DELETION_TIME":
      return "deleted with its conversations after staying paused for the deletion time";
    case "VANISHED":
      return "the sandbox's process vanished";
    case "UNHEALTHY":
      return "the sandbox stopped answering its health check";
    case "START_FAILED":
      return status === "MISSING" ? "removed with the conversation start it was made for, which failed"
        : "the sandbox could not be started";
    default:
      return null;
  }
}

// "Paused: idle for 30 min", "Missing: the sandbox's process vanished", or just "Running".
export function statusLine(status, reason, detail) {
  const word = WORDS[status] || (status ? String(status) : "Unknown");
  const why = reasonText(status, reason, detail);
  return why ? `${word}: ${why}` : word;
}

// The detail when it says more than the line (the error of a failed start, the grace of a
// health check); null when the line says it all already.
export function extraDetail(line, detail) {
  if (typeof detail !== "string" || !detail.trim()) return null;
  return line.toLowerCase().includes(detail.trim().toLowerCase()) ? null : detail;
}

// A conversation's execution_status in capitals, as the console shows every status (records
// carry it in lowercase, as the OpenHands app server sends it); null when unknown.
export function execution(record) {
  return record.execution_status ? String(record.execution_status).toUpperCase() : null;
}
