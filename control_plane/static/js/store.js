// A page's state, changed one way. The page names what can happen to it as actions ({type, …}:
// a click, an answer of the API, an event of the live stream) and writes one `update(state,
// action)` that returns the next state without touching the page; `render(next, previous)` then
// draws what changed. Handlers only dispatch; nothing else writes the state, so what a page
// shows follows from the actions it was given, in order.
//
// No framework: the state is a plain object, replaced (never mutated) by `update`, which
// returns the same object when an action changes nothing (and nothing is drawn). `render`
// compares the two states to redraw only its parts that changed, keeping what a person is
// typing, the focus and the open <details> of the rest.

export function createStore(initial, update, render) {
  let state = initial;
  return {
    get state() {
      return state;
    },
    dispatch(action) {
      const previous = state;
      state = update(previous, action);
      if (state !== previous) render(state, previous);
      return state;
    },
  };
}
