import { bigIntToIpv6, numberToIpv4, parseCidr } from "../../shared/egress.ts";

/** Address arithmetic on one subnet: offset 0 is the network address, 1 the gateway. */
export class Subnet {
  private constructor(
    readonly family: 4 | 6,
    readonly network: bigint,
    readonly prefix: number,
    readonly text: string,
  ) {}

  static parse(cidr: string): Subnet {
    const c = parseCidr(cidr, "subnet");
    return new Subnet(c.family, c.network, c.prefix, c.text);
  }

  /** Number of addresses in the subnet (2^(width - prefix)). */
  get size(): bigint {
    return 1n << BigInt((this.family === 4 ? 32 : 128) - this.prefix);
  }

  /** Address text at `offset` from the network address. */
  addressAt(offset: number): string {
    if (BigInt(offset) >= this.size || offset < 0) {
      throw new RangeError(`offset ${offset} outside ${this.text}`);
    }
    const value = this.network + BigInt(offset);
    return this.family === 4 ? numberToIpv4(Number(value)) : bigIntToIpv6(value);
  }

  /** Offset of an address inside the subnet, or undefined when it lies outside. */
  offsetOf(address: string): number | undefined {
    let c: ReturnType<typeof parseCidr>;
    try {
      c = parseCidr(`${address}/${this.family === 4 ? 32 : 128}`);
    } catch {
      return undefined;
    }
    if (c.family !== this.family) return undefined;
    const offset = c.network - this.network;
    return offset >= 0n && offset < this.size ? Number(offset) : undefined;
  }

  get gateway(): string {
    return this.addressAt(1);
  }

  /** Whether two subnets share any address. */
  overlaps(other: { family: 4 | 6; network: bigint; prefix: number }): boolean {
    if (other.family !== this.family) return false;
    const p = BigInt(Math.min(this.prefix, other.prefix));
    const width = this.family === 4 ? 32n : 128n;
    return this.network >> (width - p) === other.network >> (width - p);
  }
}
