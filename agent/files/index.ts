// Files inside a container's root, resolved the way the container sees them.
export { type ContainerRoots, ContainerFiles, FILE_CHUNK_BYTES } from "./files.ts";
export { MAX_MATCHES, MAX_SEARCH_FILE_BYTES } from "./search.ts";
export {
  MAX_SYMLINK_HOPS,
  normalizeContainerPath,
  pathInvalid,
  pathNotFound,
  type Resolved,
  resolveInRoot,
} from "./resolve.ts";
