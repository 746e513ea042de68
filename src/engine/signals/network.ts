// Network and geo signals: what the client IP address tells on its own.

import { classifyIp, isPrivateRangeType, isReservedRangeType, nat64Client, parseIp } from "../ip.js";
import type { ReferenceData } from "../reference-data.js";
import type { GeoSignals, NetworkSignals } from "../types.js";

export function computeNetworkSignals(
  ipText: string,
  referenceData: ReferenceData,
): { network: NetworkSignals; geo: GeoSignals } {
  const present = ipText.trim() !== "";
  const ip = present ? parseIp(ipText) : null;
  if (ip === null) {
    return {
      network: {
        ip: "",
        present,
        valid: false,
        version: 0,
        rangeType: "none",
        private: false,
        reserved: false,
        tor: false,
        datacenter: false,
      },
      geo: { country: "", countryKnown: false },
    };
  }
  const rangeType = classifyIp(ip);
  const isPublic = rangeType === "public";
  // An IPv4 client behind a NAT64 translator is looked up as itself.
  const client = nat64Client(ip) ?? ip;
  // Special-purpose ranges have no country; the database's answer for them
  // (2001:db8::/32 falls inside a registered block) would be misleading.
  const country = isPublic ? referenceData.geo.lookup(client) : "";
  return {
    network: {
      ip: ip.text,
      present,
      valid: true,
      version: ip.version,
      rangeType,
      private: isPrivateRangeType(rangeType),
      reserved: isReservedRangeType(rangeType),
      tor: isPublic && referenceData.torExits.current.has(client.text),
      datacenter: isPublic && referenceData.datacenterRanges.current.contains(client),
    },
    geo: { country, countryKnown: country !== "" },
  };
}
