// The built-in 'Default Thresholds' policy (specification part 2.4). It is
// the score cut-offs of decideFromScore written as rules, so listings show
// them and an account can see which rule decided; the tests hold the two
// equal for every score.

import type { PolicyDefinition } from "./model.js";

const DEFAULT_POLICY_ID = "pol_default_thresholds";

/**
 * The lowest priority the API accepts (CreatePolicyRequest.priority). At equal
 * priority a built-in policy is evaluated after custom ones, so every custom
 * policy comes first.
 */
const DEFAULT_POLICY_PRIORITY = -1_000_000;

export const DEFAULT_POLICY: PolicyDefinition & { readonly name: string; readonly description: string } = {
  id: DEFAULT_POLICY_ID,
  name: "Default Thresholds",
  description: "Deny from a score of 70, challenge from 30; evaluated after every custom policy.",
  status: "active",
  rules: [
    { condition: "score >= 70", action: "deny", description: "deny when score is at least 70" },
    {
      condition: "score >= 30 AND score < 70",
      action: "challenge",
      description: "challenge when score is at least 30 and below 70",
    },
  ],
  actions: [],
  priority: DEFAULT_POLICY_PRIORITY,
  version: 1,
  builtIn: true,
};
