// Who is signed in. The dashboard signs in by exchanging a key (or the one-time login token of the
// URL `marlforge up` prints) for an HttpOnly session cookie; the key itself is never stored here.

import { api, fill, h } from "./util.js";

/** The caller ({project, key: {id, name, role}, via}) or null when signed out. */
export let me = null;

/** True when the signed-in key may submit, cancel and resume (member or admin). */
export function canWrite() {
  return Boolean(me) && me.key.role !== "viewer";
}

/** Ask the API who the cookie belongs to; null when it belongs to no one. */
export async function whoami() {
  try {
    me = await api("/v1/whoami");
  } catch (e) {
    if (e.status !== 401) throw e;
    me = null;
  }
  return me;
}

export async function signIn(credential) {
  await api("/v1/session", { method: "POST", body: { credential } });
  return whoami();
}

export async function signOut() {
  await api("/v1/session", { method: "DELETE" });
  me = null;
}

/** The sign-in page: one field for a key; calls onSignedIn once the cookie is set. */
export function mountSignIn(root, onSignedIn, problem = null) {
  const input = h("input", { type: "password", id: "key", name: "key", autocomplete: "off",
                             placeholder: "mfk_…", required: true, spellcheck: "false" });
  const errors = h("div", { class: "errors", role: "alert", id: "signin-errors", hidden: !problem },
                   problem || "");
  const form = h("form", { class: "card signin", id: "signin", onsubmit: submit },
    h("h1", {}, "Sign in"),
    h("p", { class: "muted" }, "Paste an API key of your project. ",
      h("code", {}, "marlforge keys create --project NAME --role ROLE"), " makes one; ",
      h("code", {}, "make up"), " prints a link that signs you in as the local admin."),
    h("label", { for: "key" }, "API key"), input,
    h("div", { class: "row" }, h("button", { class: "primary", type: "submit" }, "Sign in")),
    errors);
  fill(root, form);
  input.focus();

  async function submit(event) {
    event.preventDefault();
    errors.hidden = true;
    try {
      await signIn(input.value.trim());
      input.value = "";
      onSignedIn();
    } catch (e) {
      fill(errors, e.status === 401 ? "That key is unknown, revoked or expired." : e.message);
      errors.hidden = false;
    }
  }
}
