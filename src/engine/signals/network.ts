// Network and geo signals: what the client IP address tells on its own.

import { classifyIp, isPrivateRangeType, isReservedRangeType, parseIp } from "../ip.js";
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
  // Special-purpose ranges have no country; the database's answer for them
  // (2001:db8::/32 falls inside a registered block) would be misleading.
  const country = isPublic ? referenceData.geo.lookup(ip) : "";
  return {
    network: {
      ip: ip.text,
      present,
      valid: true,
      version: ip.version,
      rangeType,
      private: isPrivateRangeType(rangeType),
      reserved: isReservedRangeType(rangeType),
      tor: isPublic && referenceData.torExits.current.has(ip.text),
      datacenter: isPublic && referenceData.datacenterRanges.current.contains(ip),
    },
    geo: { country, countryKnown: country !== "" },
  };
}
