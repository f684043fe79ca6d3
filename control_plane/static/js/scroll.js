// Following the newest: after each change to the watched parts of a page (a transcript growing,
// the dock below it), the window goes back to the bottom unless the reader scrolled up to read
// (coming back down follows again). Only a move up lets go: the page's own scrolls go down, and
// content that grew before their scroll event must not read as the reader's.
//
// This is the view's own state (where the reader is), not the page's: it changes with the
// reader's scrolling, which is no action of the page.

const NEAR_BOTTOM = 80; // px: this close to the bottom counts as at it

// Returns {stick(): follow again (the reader sent a message), stop(): let the window be}.
export function followNewest(parts) {
  let stuck = true; // following, until the reader scrolls up
  let lastY = window.scrollY;
  let scrolling = false;

  const atBottom = () =>
    window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - NEAR_BOTTOM;

  const onScroll = () => {
    if (atBottom()) stuck = true;
    else if (window.scrollY < lastY) stuck = false;
    lastY = window.scrollY;
  };

  const follow = () => {
    if (!stuck || scrolling) return;
    scrolling = true;
    requestAnimationFrame(() => {
      scrolling = false;
      window.scrollTo({ top: document.documentElement.scrollHeight });
    });
  };

  window.addEventListener("scroll", onScroll, { passive: true });
  const growth = new MutationObserver(follow);
  for (const part of parts) {
    growth.observe(part, { childList: true, subtree: true, characterData: true });
  }

  return {
    stick: () => {
      stuck = true;
    },
    stop: () => {
      window.removeEventListener("scroll", onScroll);
      growth.disconnect();
    },
  };
}
