"""The network boundary of sandboxes (issue 36): what a sandbox may reach, and how.

- `policy`: a sandbox's egress policy (`open`, `allowlist`, `none`) and the ranges no sandbox
  ever reaches, whatever its policy;
- `resolver`: the DNS server the control plane runs for its sandboxes: names answered only as
  their policy lists them, and the addresses it answers let through;
- `answers`: what that resolver may say: upstream answers stripped of AAAA and of addresses no
  sandbox reaches, and its refusals with their reasons (RFC 8914);
- `rules`: the nftables table of a segment, as text; `fence`: that table kept as the sandboxes
  need it (let in, policy changed, let out, refusals read);
- `links`: process sandboxes' network namespaces and veth pairs; `host`: the `ip` and `nft`
  commands, and this host's own networks;
- `boundary`: all of it together, as a provider uses it (`services.network_boundary` makes
  it from the configuration).
"""
