// The agent's image store: pull (skopeo), cache (one shared OCI layout),
// unpack (umoci), import for air-gapped hosts, and GC.
export type { ImageRecord } from "./catalog.ts";
export type { CommitLayerOptions } from "./commit.ts";
export { type CommandResult, type CommandRunner, execaRunner, type RunCommandOptions } from "./commands.ts";
export {
  type AwsEcrKeys,
  type BaseImageCreds,
  type BasicRegistryCredentials,
  type RegistryCredentials,
  recognisedCredentialVariables,
  resolveRegistryCredentials,
} from "./credentials.ts";
export { type EcrLoginOptions, signV4, sigV4EcrLogin } from "./ecr.ts";
export type { GcOptions, GcResult } from "./gc.ts";
export type { ImageRuntimeConfig, Platform } from "./oci-layout.ts";
export {
  type EcrLogin,
  type ImageStoreLogger,
  type ClusterRegistry,
  type ImageStoreOptions,
  type ResolvedImageStoreOptions,
  resolveImageStoreOptions,
} from "./options.ts";
export { type ImageReference, parseImageReference } from "./reference.ts";
export type { ImageInfo, ImportOptions, PullOptions, RemoveResult } from "./image-info.ts";
export { ImageStore } from "./store.ts";
export type { PullProgress } from "./pull-progress.ts";
export { type PushProgress, type PushTarget, pushImage } from "./push.ts";
export { type BlobPeer, type BlobState, blobRank, PeerBlobs, type PeerBlobsOptions } from "./peer-blobs.ts";
export { type BlobHolder, serveBlob } from "./blob-server.ts";
export { askLayerPeers } from "./layer-peers.ts";
