import type { Environment } from "../auth/keys.js";

/** The scope of every tenant query: one account in one environment. Test and live never mix. */
export interface Tenant {
  accountId: string;
  environment: Environment;
}
