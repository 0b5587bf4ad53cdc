// Finding what an instance made, by its name prefix: for start-up after a
// crash, for recover(), and for tests' safety nets.

import { deleteLink, deleteNetns, listLinks, listNetns } from "./links.ts";
import { removeGangLinks } from "./gang.ts";
import { deleteNftTables } from "./nft.ts";

const hex6 = "[0-9a-f]{6}";

export const netnsNamePattern = (prefix: string) => new RegExp(`^${prefix}-n${hex6}$`);
export const vethNamePattern = (prefix: string) => new RegExp(`^${prefix}v${hex6}$`);

export const netnsName = (prefix: string, suffix: string) => `${prefix}-n${suffix}`;
export const vethName = (prefix: string, suffix: string) => `${prefix}v${suffix}`;

/** Namespaces and host veths named by this prefix, except those in `keep`. */
export async function findLeftovers(
  prefix: string,
  keep: ReadonlySet<string>,
): Promise<{ netns: string[]; veths: string[] }> {
  const nsPattern = netnsNamePattern(prefix);
  const vethPattern = vethNamePattern(prefix);
  const netns = (await listNetns()).filter((n) => nsPattern.test(n) && !keep.has(n));
  const veths = (await listLinks()).map((l) => l.ifname).filter((n) => vethPattern.test(n) && !keep.has(n));
  return { netns, veths };
}

export async function removeLeftovers(prefix: string, keep: ReadonlySet<string>): Promise<string[]> {
  const { netns, veths } = await findLeftovers(prefix, keep);
  for (const v of veths) await deleteLink(v);
  for (const n of netns) await deleteNetns(n);
  return [...veths, ...netns];
}

/**
 * Removes everything an instance with these names may have left: its
 * namespaces and veths, its gangs' devices, its bridge and its two nft tables. For uninstall and
 * for tests; never touches anything not named by these values.
 */
export async function cleanupNetworkByPrefix(names: { namePrefix: string; bridge: string; table: string }) {
  await removeGangLinks(names.namePrefix);
  await removeLeftovers(names.namePrefix, new Set());
  await deleteNftTables(names.table);
  await deleteLink(names.bridge);
}
