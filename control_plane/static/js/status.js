// Why a sandbox is in its status, in words: from a sandbox's status_reason and status_detail,
// or from a `sandbox_status` notice among a conversation's events ({sandbox_id, status, reason,
// detail}). Plain strings: the pages put them in as text.
import { SANDBOX, SANDBOX_REASON, SANDBOX_WORDS } from "./schema.js";

// The reason alone ("idle for 30 min", "the 12-hour limit"), or null when none is known.
export function reasonText(status, reason, detail) {
  switch (reason) {
    case SANDBOX_REASON.USER:
      return {
        [SANDBOX.PAUSED]: "you paused it",
        [SANDBOX.RUNNING]: "you resumed it",
        [SANDBOX.MISSING]: "you deleted it",
      }[status] || "your action";
    case SANDBOX_REASON.IDLE:
      return typeof detail === "string" && detail.startsWith("idle for ") ? detail : "idle";
    case SANDBOX_REASON.SESSION_CAP:
      return status === SANDBOX.PAUSED ? "the 12-hour limit" : "after the 12-hour limit";
    case SANDBOX_REASON.DELETION_TIME:
      return "deleted with its conversations after staying paused for the deletion time";
    case SANDBOX_REASON.VANISHED:
      return "the sandbox's process vanished";
    case SANDBOX_REASON.UNHEALTHY:
      return "the sandbox stopped answering its health check";
    case SANDBOX_REASON.START_FAILED:
      return status === SANDBOX.MISSING
        ? "removed with the conversation start it was made for, which failed"
        : "the sandbox could not be started";
    default:
      return null;
  }
}

// "Paused: idle for 30 min", "Missing: the sandbox's process vanished", or just "Running".
export function statusLine(status, reason, detail) {
  const word = SANDBOX_WORDS[status] || (status ? String(status) : "Unknown");
  const why = reasonText(status, reason, detail);
  return why ? `${word}: ${why}` : word;
}

// The detail when it says more than the line (the error of a failed start, the grace of a
// health check); null when the line says it all already.
export function extraDetail(line, detail) {
  if (typeof detail !== "string" || !detail.trim()) return null;
  return line.toLowerCase().includes(detail.trim().toLowerCase()) ? null : detail;
}
