"""What the extension contains, besides its SQL: versions, features, and each routine's policy.

The routines themselves (names, arguments with their defaults, results) are declared once, in
the templates: ``pgmq_build/surface.py`` parses them out of the rendered install script and
``pgmq-build generate`` writes them to docs/api.txt, the listing that reviews see and the
catalog-contract test checks an installed database against. This module keeps only what the SQL
cannot say: why a routine may run as its owner, why it may leave search_path alone, whether it
does upstream's work (ROUTINES), and upstream PGMQ's own signatures, the contract our upstream
routines must keep (UPSTREAM_CONTRACT). The lint checks the rendered SQL against both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

SCHEMA = "pgmq"
# The version being built. Once a version is released (listed in RELEASED below) it can never be
# rendered again: bump VERSION before changing the SQL surface or a table layout.
VERSION = "2.17.0"
# How many of the newest released versions upgrade in place with what `make install` ships (their
# steps of the chain). Every release adds a step (0.1 to 0.6 MB) and no released step may change,
# so the chain would outgrow any fixed size: the steps from older releases retire to
# history/extension/, whence `make install-retired` (a checkout) still installs them.
UPGRADE_WINDOW = 10

# Per-queue object prefixes and the identifier budget (NAMEDATALEN - 1 = 63).
# pg_partman's template table "template_pgmq_q_<name>" is the longest name we cause.
IDENTIFIER_BUDGET = 63
LONGEST_PREFIX = "template_pgmq_q_"
MAX_QUEUE_NAME = IDENTIFIER_BUDGET - len(LONGEST_PREFIX)  # 47, as upstream


@dataclass(frozen=True)
class Policy:
    """What the SQL cannot say about a routine (every routine the templates create has one).

    Keyed by name: it covers every overload of the name, unless ``arg_types`` names one
    overload (input argument types as PostgreSQL prints them), for an overload whose policy
    differs from the others'.
    """

    name: str
    arg_types: tuple[str, ...] | None = None
    # Why this routine may be SECURITY DEFINER ("" = it must not be): lint PGMQ003.
    definer_reason: str = ""
    # An internal routine only upstream functions call (their work, moved out of them): like an
    # upstream function, it raises only what pgmq_build/errors.py declares (lint PGMQ011).
    upstream_path: bool = False
    # Why this routine does not pin search_path ("" = it does). A procedure that COMMITs cannot
    # (PostgreSQL forbids SET there), and a name given by the caller may need the caller's
    # search_path. Such a routine qualifies every name and operator itself.
    unpinned_reason: str = ""
    commits: bool = False  # a procedure that controls transactions (needs unpinned_reason)

    @property
    def security_definer(self) -> bool:
        return bool(self.definer_reason.strip())

    @property
    def key(self) -> tuple[str, tuple[str, ...] | None]:
        return (self.name, self.arg_types)


def policies(*entries: str | Policy) -> tuple[Policy, ...]:
    """ROUTINES' entries: a bare name is a routine with the default policy (our rights, pinned
    search_path, no transaction control)."""
    return tuple(Policy(e) if isinstance(e, str) else e for e in entries)


@dataclass(frozen=True)
class Release:
    """A released version: its scripts are frozen, byte for byte.

    ``scripts`` maps each file of extension/ that the release shipped to its sha256: the two
    install scripts (``pgmq--V.sql``, ``pgmq-standalone--V.sql``) and, for every release but the
    first, the two upgrade scripts into it from the previous release
    (``pgmq--P--V.sql``, ``pgmq-standalone--P--V.sql``).
    """

    version: str
    scripts: Mapping[str, str] = field(hash=False)


def version_key(version: str) -> tuple[int, ...]:
    """"2.10.0" sorts after "2.9.1"."""
    return tuple(int(part) for part in version.split("."))


# Released versions, oldest first. Releasing the current version: add its record here with the
# sha256 of every file it shipped (`sha256sum extension/pgmq--V.sql ...`), then bump VERSION and
# add templates/upgrades/<V>--<new>/ (see README, "Upgrading").
RELEASED: tuple[Release, ...] = (
    Release("2.0.0", {
        "pgmq--2.0.0.sql": "a8cb97be908f70ddb503b7e274d26d06710c986cbddb456a1a8b325c057fad41",
        "pgmq-standalone--2.0.0.sql": "585ced552ca8336cd583c2136fab00222e3673dbaf6cfc981f1c7632216db546",
    }),
    Release("2.1.0", {
        "pgmq--2.1.0.sql": "53a3fd87ee05c10e67f8b450fc2d036b0e7a05c20fcb66a9fd84e53640ed8a8c",
        "pgmq-standalone--2.1.0.sql": "7b888001ee2f2a059ab04e377362fbbfb2e2568b2829cbe9dc7fa82def6976cd",
        "pgmq--2.0.0--2.1.0.sql": "0c95339714d975f4f43645333a307def3f76ede0c250d6085775c111c91c59cc",
        "pgmq-standalone--2.0.0--2.1.0.sql": "9240ef2dbffb9c694f22861b708f9dc4f0e660946fa0b81c0db069f43e2e4161",
        "pgmq--1.13.0--2.1.0.sql": "cbd9fe4b25c5ce41245996be512b97c549ca11a7e08c904eda1e0064b5a10e60",
        "pgmq--1.13.1--2.1.0.sql": "c37af858a79fb8412534eea585f60f0236d29bf7f5ed244a3650871cce18f9f4",
        "pgmq-standalone--1.13.0--2.1.0.sql": "0ba6f13e9a438d8ea9c6805f8b05d9607816fa7ffc6cd0d539b3f9f25f8094e9",
        "pgmq-standalone--1.13.1--2.1.0.sql": "6b13bda3c38a577bdeedefc03ed04eb8015c742c6055731ff3f1f34f0e684800",
    }),
    Release("2.2.0", {
        "pgmq--2.2.0.sql": "af05c1155f3482c8f7266b09fb758f3e83db5cf5193aa47d69034f6664144439",
        "pgmq-standalone--2.2.0.sql": "300ac654754a220acc49e31570ed029786a68184644d3d8eaf335718661f77d9",
        "pgmq--2.1.0--2.2.0.sql": "a317699cf267f751097a0789f7ca2d62a03fdee55d8ecde49235aff2f63458a9",
        "pgmq-standalone--2.1.0--2.2.0.sql": "1ac182d443dca615b46656d72dbddaafb0492297c8eab01b79d3087140bbec94",
        "pgmq--1.13.0--2.2.0.sql": "2e9317d13638e13675e2ad842d2f8b9191ea9f7695405632f58bf6799958e480",
        "pgmq--1.13.1--2.2.0.sql": "5c3c466da487432a64b36d3d3a9171cc512aa0c7fd402afb0c2ad98737e5c0da",
        "pgmq-standalone--1.13.0--2.2.0.sql": "2816c42cb3ab41d2f767a4a890f00debe334e57e2eaf8fef87ccec94ee006e21",
        "pgmq-standalone--1.13.1--2.2.0.sql": "75b8bf4841ae478e20004f490e44b61e3dae211841caa5445d6b0b82913eb734",
    }),
    Release("2.3.0", {
        "pgmq--2.3.0.sql": "9c50a8b102056b23acab553320f67a1176e2a224226b81451bfe6d300186c5cb",
        "pgmq-standalone--2.3.0.sql": "85f24114a5ac28070c0d18f283cd745800da7859e51003cc135afc08b5492f56",
        "pgmq--2.2.0--2.3.0.sql": "962c9f2b3fce4493b2d52227995e9a06b64128b9eb8fe3754c69ddcd53d65f34",
        "pgmq-standalone--2.2.0--2.3.0.sql": "e676c6884e9ace6516f40a549eb451a72cc762f35d2f607d7f0735808391874e",
        "pgmq--1.13.0--2.3.0.sql": "281ef6b8eb72a99a8e5b9b7d739cc5a4fbebc87f6a66c19c01e509b5810001e4",
        "pgmq--1.13.1--2.3.0.sql": "7a97b396432d3ba1ad8c43c27eaeeb245cfb78d3363824e881228861855714a9",
        "pgmq-standalone--1.13.0--2.3.0.sql": "880cd6bd570510cd8c4a57cefa9dae740cdb60ca8a1f110a3802e11454fdbc87",
        "pgmq-standalone--1.13.1--2.3.0.sql": "fba826855198db36a51f6d103962c2a777c127737868dbeabf8a1528a5332ab0",
    }),
    Release("2.4.0", {
        "pgmq--2.4.0.sql": "0662c00e8fb246252ad875770776f4a46f4ff4f2ed994743650a9dc8ad7000fb",
        "pgmq-standalone--2.4.0.sql": "5b37438993ad83fcbc2bdfa922212e1290424da961fa873f2eb276d557313d71",
        "pgmq--2.3.0--2.4.0.sql": "d61e44f1a2e4bf6ecb44e1b12bc7ea294ac695502af848db9426dfcee2bb710f",
        "pgmq-standalone--2.3.0--2.4.0.sql": "f42b436d6d308755b70b143927edbeb6b32777a03756288c4091f7a2359405a4",
        "pgmq--1.13.0--2.4.0.sql": "9136a398eb913df45a0cacbdf0363e0f218f327951a95a1090c6bbb4433a606f",
        "pgmq--1.13.1--2.4.0.sql": "07198b7482ec3cebbfcf00c42e3d93e38779d2975a8a4243f6aa8c267f14f79f",
        "pgmq-standalone--1.13.0--2.4.0.sql": "db94b0b50434ec22b96fb9f5d511b91068aa678859b12fb75d143c33096a00d7",
        "pgmq-standalone--1.13.1--2.4.0.sql": "48a05204ad30a0fb602384e5f9bccbc7b161ba15c93e53020310fb6fb0a9139b",
    }),
    Release("2.5.0", {
        "pgmq--2.5.0.sql": "c961edbca548f782ff44a6cf4aeebd77b38f43561f94ff9c9f200af73a7bfa3e",
        "pgmq-standalone--2.5.0.sql": "c1bbc43984aba46eabe3693ce5f485c84e82e27e710e5eedca616707e96910aa",
        "pgmq--2.4.0--2.5.0.sql": "0c0d9018409c586ae14f2bd57bb25cbf5f03b50b522d00c5636e154fbaee94ad",
        "pgmq-standalone--2.4.0--2.5.0.sql": "a8e2823983ee0e3d6a221a5e2528dc0f1c802bfbbfc94aa197bc2d92b51e9c5a",
        "pgmq--1.13.0--2.5.0.sql": "3086c63afd6d4873225d6d51d53b31cb914470293e4ea44b24af3c7ca37f032a",
        "pgmq--1.13.1--2.5.0.sql": "183a3dfee2200f9e0cf6c6510eb9f1474736ec95a7b8f4c2cf5916f55ce77a85",
        "pgmq-standalone--1.13.0--2.5.0.sql": "524809b3e2870a559abaf0f8e80b7e29debdbf65d26d897aaded561cb8b902f3",
        "pgmq-standalone--1.13.1--2.5.0.sql": "b53554e6306013c018b2f15d9ee06c78211444445f238d836f2869c29eb97428",
    }),
    Release("2.6.0", {
        "pgmq--2.6.0.sql": "eda926fb8eea64ccf533a7a3f0505afc9eebd60f514a7b090a2f6dbb375107fc",
        "pgmq-standalone--2.6.0.sql": "4a52ecabf1f18056220d36412be6cc4be4dbf25689ee1713bc491183e1413d0c",
        "pgmq--2.5.0--2.6.0.sql": "eb599c17ba25bb26f635774aaed8f5ec148e747bed43ba78b8c04072ecaa94b9",
        "pgmq-standalone--2.5.0--2.6.0.sql": "3b42a1030c75dbb34531a3b3db83363ba3f477b1a02855ed8c8a53628089ee41",
        "pgmq--1.13.0--2.6.0.sql": "ad6a9e8d654eae77a273e8aeee760145a3a4e76aa144496e39545a5b40a6a7d0",
        "pgmq--1.13.1--2.6.0.sql": "a7bd77d00a60a67ed6c148470e2986149722decb33209455d66b8a13fd4e66cb",
        "pgmq-standalone--1.13.0--2.6.0.sql": "dff4d0009300a58f1aaf27f7032aadbcb8f15198e67c62ea2aac35b1582ba80b",
        "pgmq-standalone--1.13.1--2.6.0.sql": "4d63f6fb1400fd5d349858e6fa10f52ef12b12e9616d03c1adf64de9d71d6caa",
    }),
    Release("2.7.0", {
        "pgmq--2.7.0.sql": "aa87df149d024e2bc039c3fa675dc5d2e0966fd3393021ffda6fdf75a9ce5dc1",
        "pgmq-standalone--2.7.0.sql": "be3a27ab09ea2a517253d686322149f6eaac7ab00f4186a10b5c01a81ad44046",
        "pgmq--2.6.0--2.7.0.sql": "943188d49b780275def3fcdda01eb8d9659bc12cee063a5e26a7f1b48c28f132",
        "pgmq-standalone--2.6.0--2.7.0.sql": "49506ab0900c40f93d26c8f2918ddc6421ef687014808f2775ba6eb831483c94",
        "pgmq--1.13.0--2.7.0.sql": "8ec9700d56f2132f1423093a546870f1482028eaffb8ea82ee68f158c051527c",
        "pgmq--1.13.1--2.7.0.sql": "412ef37eeb1451fc2d47e37dc49f88adcee6e68861dec0f9d11a886294f8cccc",
        "pgmq-standalone--1.13.0--2.7.0.sql": "4d11aa87f3f8e1a6a0fcf0a2b7188de6c44bc12f81be536f2d7f9de89fa0e3c3",
        "pgmq-standalone--1.13.1--2.7.0.sql": "e698acc583dfe57731d408a761314ee939bf8543898938c277519e3b5e6d3219",
    }),
    Release("2.8.0", {
        "pgmq--2.8.0.sql": "11a379067175698d752e4dabd1b9665580cd21a6c7d06bff64d0358b0c6b2c37",
        "pgmq-standalone--2.8.0.sql": "c4d7f14a48087e7befef348987a315bc72b362e3a9b0af926e099ba4558b624f",
        "pgmq--2.7.0--2.8.0.sql": "aba7bce667b29af17a36c35183b663f078cf5228f4d6553c6c0aa2c9debaba0e",
        "pgmq-standalone--2.7.0--2.8.0.sql": "8769a3c09ee2e2c99d90a4346c95a44bc13eb76597da31ca70098218b33ab9a5",
        "pgmq--1.13.0--2.8.0.sql": "e05a414e3b9a178634de6d21444fa46b020193315281def02134ab587a1422b3",
        "pgmq--1.13.1--2.8.0.sql": "f042e66e137da8e5d44aa8eb916c81c15d72ef5e5c7a0ac275d5f58c6910d796",
        "pgmq-standalone--1.13.0--2.8.0.sql": "4f0a45e55c8414dd3699868162712e902eb4928789c0dd4c3ff456523e538f5d",
        "pgmq-standalone--1.13.1--2.8.0.sql": "0373e5d52c1dc0aa196d80db260919c4337853327dc7b09b2be018b1e9f96b65",
    }),
    Release("2.9.0", {
        "pgmq--2.9.0.sql": "6a8a59f01dbfbf41689dd2ef3502a8035896268b8b774a2b9b0e77733ceaded2",
        "pgmq-standalone--2.9.0.sql": "63d31ce5e14b070b6d3e7a1b6c84e76c686158b625e394c90d9f489ac5448ddb",
        "pgmq--2.8.0--2.9.0.sql": "c350a2028bceab40c583faed871c6699bc63d8315b34a7f766c1dedf9b95e9fb",
        "pgmq-standalone--2.8.0--2.9.0.sql": "d5cbfe43b1cc7ec9b52744f51fe0b0bd115b4d598481d567b090fe4b5fe475bd",
        "pgmq--1.13.0--2.9.0.sql": "2374c49e0c902b95ec37062ec411ef434698aec7fb35d8d2750c178b353ad411",
        "pgmq--1.13.1--2.9.0.sql": "784b5c96803c177cda765eadd47beff0284a168264905a09a65d8c66b8e12687",
        "pgmq-standalone--1.13.0--2.9.0.sql": "f21575a08337fb05798cf3b4171817281d327ce0d0cd7b784cfdefe1b74290bc",
        "pgmq-standalone--1.13.1--2.9.0.sql": "ce5f6504f7e139cbab598ed57486599a0697f7b5761aeb86269d54751cf30a07",
    }),
    Release("2.10.0", {
        "pgmq--2.10.0.sql": "7d96b3f1e87c99d441d69be4bc38f2ca9c2e2c329b69d3c37e66f8dfe94e831c",
        "pgmq-standalone--2.10.0.sql": "c3ecae06c573e089a07c3bd0383fadd65c63b5cf05a32f48fccec4bc9497d92a",
        "pgmq--2.9.0--2.10.0.sql": "20add1b94d3646e5ea287e38faec16cced810ddb43504ec3da467c06aa883b92",
        "pgmq-standalone--2.9.0--2.10.0.sql": "d9b4e13f91de7a6557ff6e79c93a3f674987e8ce2a9e849cfc524ca243fa0d47",
        "pgmq--1.13.0--2.10.0.sql": "0d28759966f1a04fd5d2ca64da4674cc930d65c1b0c3dfdc277d612c39425c9e",
        "pgmq--1.13.1--2.10.0.sql": "a42a49f41d7af38d7b7eaa95105ba25da775fdb14b8a1f1583ee82a3bf16fe0b",
        "pgmq-standalone--1.13.0--2.10.0.sql": "479f3c8a10dda86ceb480b216f852cfaa862fe110a20ff79df675027072ac815",
        "pgmq-standalone--1.13.1--2.10.0.sql": "cfa48bf53bd281b3c57a4a8e3ecda992544d1c38eb1d206ad7bbbf00e498b807",
    }),
    Release("2.11.0", {
        "pgmq--2.11.0.sql": "956e938ad949537a4c5eecb01a3818cfde911e568ffc2999d64a85b257831229",
        "pgmq-standalone--2.11.0.sql": "9919ab8cccbd9ff3e5cf3188f155a48857ab2d4a91da266d3b59ad1fe2862ebb",
        "pgmq--2.10.0--2.11.0.sql": "52d56c4dc94b8c8d4a65c756a3aac9e7c76818a00417d5726b96dc65f179463f",
        "pgmq-standalone--2.10.0--2.11.0.sql": "a44f67ec3f9e4137e170d5c6e00dd955d1365eeef39bb05fe9b28254bea99ee3",
        "pgmq--1.13.0--2.11.0.sql": "f1560fa9eeb43967a61215e53ccd2d4a6e9ffc312d79237a86dddb538cc6454e",
        "pgmq--1.13.1--2.11.0.sql": "eb1c0627f776df78a1786ff8fe644f0c724619544ef09784017ac7b10b56984b",
        "pgmq-standalone--1.13.0--2.11.0.sql": "0c1f9988e8805b659e209f6d0b7acc59d5673462c2fec36d78c2dad96e83a11b",
        "pgmq-standalone--1.13.1--2.11.0.sql": "8e4e9b3986c10761d9cac57815394e1424e962c187f1cdd9faa1a3e7d620ba64",
    }),
    Release("2.12.0", {
        "pgmq--2.12.0.sql": "c429928454ff10f746ca1e6827b0df61ac15005f71c1a6b8342818bd08166666",
        "pgmq-standalone--2.12.0.sql": "1ebceb7f7a98e76581caab87ad1e32191521a3e0430e9d31f3b80abd7d1d091f",
        "pgmq--2.11.0--2.12.0.sql": "8b6776896d8f8511db3bd580e198f3fd123079ab1ab3a5dd99bcf8b69a682330",
        "pgmq-standalone--2.11.0--2.12.0.sql": "77718840c05e297342874f743d65caecfb767c12079fb8d6c32d589d18a704a4",
        "pgmq--1.13.x--2.12.0.sql": "a54108fca2728552466302e9222fd757648886a5dc998f655ac9328743de49f1",
        "pgmq-standalone--1.13.x--2.12.0.sql": "18ae04dddcd06864e70e256084e8aaacdcd8e19f574fd1ca62ef8c58dd640042",
        "pgmq--1.13.0--1.13.x.sql": "27685d11c3b1922abe743d694ab81d894ed6116129e110a9b69dab6230022691",
        "pgmq--1.13.1--1.13.x.sql": "f34cce6451e29065966af61cee14ae3f0f737892823e52c32e3cc9bb21b025cb",
    }),
    Release("2.13.0", {
        "pgmq--2.13.0.sql": "64f054e2e8d2f195e23e0f8c319a1e7df94be9103adea518af7d3f540fb118e9",
        "pgmq-standalone--2.13.0.sql": "20fb4674497dd3bc3e024b0a1f3e35bcbeace016d92a33112ed9d9f9b5cfcfd0",
        "pgmq--2.12.0--2.13.0.sql": "41e4739d6f67ea555b0fabc36e105aac8d9d5fc32638adcc5524389570f55b57",
        "pgmq-standalone--2.12.0--2.13.0.sql": "3873d1be8b39aadda91584b55a1f654ad9cc1bf7e491e7d4ffc24ccaa9b165cb",
        "pgmq--1.13.x--2.13.0.sql": "dd32cf26af00737257fe71e5717c093da569bb2193bad1425df208e44eef4301",
        "pgmq-standalone--1.13.x--2.13.0.sql": "0ff84baa233fef38a50c658c2d13c3c0917d7fa40d22b937778e6b57bb231762",
    }),
    Release("2.14.0", {
        "pgmq--2.14.0.sql": "a5521471e35a0c342f322562afdbbf1f6490f1d8cc27321857874880dc6c277f",
        "pgmq-standalone--2.14.0.sql": "fed509a52fccc195a1937b4656ccce1217da207d13a3299e897f45c08b4b7626",
        "pgmq--2.13.0--2.14.0.sql": "7a97f8811c8c41b5278fc6a9a29025f79681b78334cdaf365fa0acd0d1b6bca2",
        "pgmq-standalone--2.13.0--2.14.0.sql": "b8c2de5cd98c117f898611b960a035896f47f7a3771a564545dd8f2488b64837",
        "pgmq--1.13.x--2.14.0.sql": "7b4f12253666b10f3ca95c204ba29959083061d8e690852ad3e1596b608478dc",
        "pgmq-standalone--1.13.x--2.14.0.sql": "46381c028e87a157f9f296b04188cc8d7c406ea0ce70f1a7dddae4467a2fa28d",
    }),
    Release("2.15.0", {
        "pgmq--2.15.0.sql": "c2fb1b6f62c87e896e0d31f17e0621f9e2c78888e4d1eeb834d1a46ec6bb2d5e",
        "pgmq-standalone--2.15.0.sql": "05c7d7ac22da0288cde80ecadb107167611202e77a892daebf7f224e4b9e8c2f",
        "pgmq--2.14.0--2.15.0.sql": "835177f0a172b61925370f0c381ece7384dcbc732338fba5024f1c5578ff45db",
        "pgmq-standalone--2.14.0--2.15.0.sql": "a73f145ff34a3db23ebd4cd59989a86e84a8ab7303479b4684c92a3e58b04f24",
        "pgmq--1.13.x--2.15.0.sql": "69abd9354b428fcc5878f34b13927be5b6ccccade76fcedf38be6d0db54dc1cb",
        "pgmq-standalone--1.13.x--2.15.0.sql": "eff64eff33033fda6ff6b373f207da3ccaf413988d8a808966792e210e3dffa2",
    }),
    Release("2.16.0", {
        "pgmq--2.16.0.sql": "df74ec4d6e266453357ad4492631d9c0c2c6a1aed532a45fd8b9388f779d79bf",
        "pgmq-standalone--2.16.0.sql": "3fa42aa6d3fa71fc44369e10a951f380998c544f7a67c17424faeed5f697ae92",
        "pgmq--2.15.0--2.16.0.sql": "0934502d2125b2f0602ff64be2b0872687c3695024f133f5f202aedb37c68bd1",
        "pgmq-standalone--2.15.0--2.16.0.sql": "0bf3ee7cb3fc5461cc61d6c5a654b6440f0355f9a5baae80bcae229c435673d5",
        "pgmq--1.13.x--2.16.0.sql": "195793bca6785352e5ebfe8f34e1c8e45db4911530cfcf9eb65d35e9869f99b1",
        "pgmq-standalone--1.13.x--2.16.0.sql": "51bc0c16c3873548c5fd41191dc70c9f44a70df431f26cb2b386d9d58317f140",
    }),
)


# Upstream PGMQ releases that become ours in place, straight to this version: ALTER EXTENSION
# pgmq UPDATE from upstream's extension, `pgmq-build migrate` for upstream's SQL-only install.
# docs/guides/migrating-from-pgmq.md; the step's hand-written parts are templates/upgrades/upstream/.
UPSTREAM_VERSIONS = ("1.13.0", "1.13.1")

# Our name for "upstream PGMQ 1.13.0 or 1.13.1", a version no upstream release has. The two
# have the same tables and routine identities, so one step turns either into this version:
# pgmq[-standalone]--1.13.x--<VERSION>.sql (0.9 MB, replaced each release like the install
# script). An extension reaches it through a bridge, pgmq--<upstream>--1.13.x.sql, that holds
# only a comment and names no version of ours, so it never changes and stays in extension/ at
# each release (history.py); ALTER EXTENSION pgmq UPDATE takes the two steps (PostgreSQL runs
# the shortest chain of scripts). The standalone form needs no bridge: `pgmq-build migrate` runs
# the one step itself. Released records of 2.11.0 and older name the per-version steps they shipped.
UPSTREAM_BRIDGE = "1.13.x"

# Objects of our install script that upstream 1.13 already has, defined the same way (the catalog
# test compares an upgraded database with a fresh install): an upgrade from upstream keeps
# upstream's, with their rows, instead of creating them. Every other object of the install script
# is created by the upgrade; upstream's routines are dropped first (ours have their identities:
# UPSTREAM_CONTRACT) and its topic_bindings table becomes rows of exchange_bindings.
UPSTREAM_KEPT: Mapping[str, tuple[str, ...]] = {
    "type": ("message_record", "queue_record", "metrics_result"),
    "table": ("meta", "notify_insert_throttle"),
    "index": ("idx_notify_throttle_active",),
}


@dataclass(frozen=True)
class Feature:
    """A folder of templates under templates/features/<name>, rendered in manifest order.

    ``uses``: the features whose objects this one's SQL names (computed from the rendered script
    and compared by tests/unit/test_features.py; pgmq_build/features.py). It documents, it orders
    nothing: the extension installs every feature, and some use each other.
    """

    name: str
    templates: tuple[str, ...]
    config_tables: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()


@dataclass(frozen=True)
class Manifest:
    version: str
    schema: str
    released: tuple[Release, ...]
    features: tuple[Feature, ...] = field(default_factory=tuple)
    upstream: tuple[str, ...] = ()  # UPSTREAM_VERSIONS: upstream PGMQ versions that upgrade to this one
    bridge: str = UPSTREAM_BRIDGE  # the version name the upstream versions are bridged to
    routines: tuple[Policy, ...] = ()  # ROUTINES: every routine's policy
    contract: tuple[str, ...] = ()  # UPSTREAM_CONTRACT: upstream's signatures (Signature.line)
    window: int = UPGRADE_WINDOW  # the newest released versions whose steps ship

    @property
    def released_versions(self) -> tuple[str, ...]:
        return tuple(r.version for r in self.released)

    @property
    def versions(self) -> tuple[str, ...]:
        """Every version an install can be at, oldest first: the released ones, then this one."""
        return (*self.released_versions, self.version)

    @property
    def retired_versions(self) -> tuple[str, ...]:
        """Released versions older than the window: their steps are in history/extension/ only."""
        return self.released_versions[:max(len(self.released) - self.window, 0)]

    @property
    def steps(self) -> tuple[tuple[str, str], ...]:
        """(from, to) of every upgrade step: one per consecutive pair of versions."""
        versions = self.versions
        return tuple(zip(versions, versions[1:], strict=False))

    def release(self, version: str) -> Release | None:
        return next((r for r in self.released if r.version == version), None)

    @cached_property
    def _policies(self) -> dict[tuple[str, tuple[str, ...] | None], Policy]:
        return {p.key: p for p in self.routines}

    def policy(self, name: str, arg_types: tuple[str, ...]) -> Policy | None:
        """The policy of routine name(arg_types): its overload's entry, else its name's."""
        return self._policies.get((name, tuple(arg_types))) or self._policies.get((name, None))

    @property
    def config_tables(self) -> tuple[str, ...]:
        return tuple(t for feat in self.features for t in feat.config_tables)

    def feature(self, name: str) -> Feature:
        for feat in self.features:
            if feat.name == name:
                return feat
        raise KeyError(name)


CORE = Feature(
    name="core",
    uses=("delivery",),
    templates=(
        "types.sql.j2",
        "tables.sql.j2",
        "ownership.sql.j2",
        "functions/helpers.sql.j2",
        "functions/locks.sql.j2",
        "functions/ownership.sql.j2",
        "functions/queue_admin.sql.j2",
        "functions/send.sql.j2",
        "functions/send_batch.sql.j2",
        "functions/priorities.sql.j2",
        "functions/read.sql.j2",
        "functions/delete_archive.sql.j2",
        "functions/set_vt.sql.j2",
        "functions/static_paths.sql.j2",
        "functions/metrics.sql.j2",
        "grants.sql.j2",
    ),
    config_tables=("meta", "queue_owners"),
)

PARTITIONED = Feature(
    name="partitioned",
    uses=("core", "delivery"),
    templates=("functions/partman.sql.j2", "functions/create_partitioned.sql.j2", "functions/read_floor.sql.j2"),
)

FIFO = Feature(
    name="fifo",
    uses=("core", "delivery"),
    templates=("functions/fifo_index.sql.j2", "functions/read_grouped.sql.j2"),
)

# Exchanges and upstream's topics: one routing engine (_route); topic_bindings is a view of the
# built-in topic exchange 'pgmq.topic'.
ROUTING = Feature(
    name="routing",
    uses=("core", "streams"),
    # the generated column of exchange_bindings calls _topic_regex, so validate.sql.j2 comes first
    templates=("functions/validate.sql.j2", "tables.sql.j2", "functions/routing.sql.j2",
               "functions/exchanges.sql.j2", "functions/bindings.sql.j2", "functions/publish.sql.j2",
               "functions/send_topic.sql.j2"),
    config_tables=("exchanges", "exchange_bindings", "stream_bindings", "exchange_publishers"),
)

NOTIFY = Feature(
    name="notify",
    uses=("core",),
    templates=("tables.sql.j2", "functions/notify_insert.sql.j2", "functions/notify_msg_id.sql.j2"),
    config_tables=("notify_insert_throttle",),
)

DELIVERY = Feature(
    name="delivery",
    uses=("core",),
    templates=("tables.sql.j2", "functions/policy.sql.j2", "functions/dead_letter.sql.j2",
               "functions/nack.sql.j2", "functions/dedup.sql.j2", "functions/reserve.sql.j2",
               "functions/expire.sql.j2", "functions/claims.sql.j2", "functions/batch_ack.sql.j2",
               "functions/delivery_counting.sql.j2"),
    config_tables=("queue_settings", "dedup_keys", "dead_letter_origins", "queue_counters"),
)

PAYLOADS = Feature(
    name="payloads",
    uses=("core", "delivery"),
    templates=("functions/types.sql.j2", "functions/messages.sql.j2"),
)

PGPRO = Feature(
    name="pgpro",
    uses=("core", "delivery", "payloads", "routing"),
    templates=("functions/queues.sql.j2", "functions/messages.sql.j2", "functions/publish.sql.j2"),
)

CALLBACKS = Feature(
    name="callbacks",
    uses=("core", "delivery"),
    templates=("tables.sql.j2", "functions/callbacks.sql.j2"),
    config_tables=("callbacks", "callback_counts"),
)

# Operations: metrics for dashboards and exporters, pause/resume, browsing and moving messages.
OPS = Feature(
    name="ops",
    uses=("core", "delivery", "callbacks"),
    templates=("types.sql.j2", "functions/pause.sql.j2", "functions/queue_metrics.sql.j2",
               "functions/browse.sql.j2", "history.sql.j2"),
)

# Streams (PgQ's model): append-only logs in rotated segment tables, subscriptions at ticks.
STREAMS = Feature(
    name="streams",
    uses=("core",),
    templates=("tables.sql.j2", "functions/admin.sql.j2", "functions/paths.sql.j2",
               "functions/ticks.sql.j2", "functions/subscriptions.sql.j2", "functions/access.sql.j2"),
    config_tables=("streams", "stream_segments", "stream_ticks", "stream_subscriptions", "stream_batches",
                   "stream_tick_seq"),
)

ACCESS = Feature(
    name="access",
    uses=("core", "delivery", "routing", "notify", "callbacks", "streams"),
    templates=("functions/access.sql.j2", "policies.sql.j2"),
)

# SECURITY DEFINER routines work on tables that belong to the extension's owner for a caller that
# _prove_caller has proven; each says why that is safe.
PROVEN_OWNER = "for the queue's owner proven by _prove_caller"
KEEPS_SEARCH_PATH = ("pg_partman sets search_path at session level; this outer function puts the caller's "
                     "value back after its pinned inner function returns")
CALLERS_PATH = "resolves the callback's name in the caller's search_path"

# Every routine the templates create, by name, in install order (CONTRIBUTING.md; signatures:
# docs/api.txt). A bare name: the default policy. The lint fails on a routine without an entry
# here and on an entry without a routine.
ROUTINES = policies(
    # core: helpers, ownership (templates/_macros/ownership.sql.j2), queue management
    "_extension_exists", "_belongs_to_pgmq", "format_table_name", "validate_queue_name",
    "_format_table_name", "_validate_queue_name", "acquire_queue_lock", "_queue_name_of", "_lock_queue",
    "_lock_queue_config",
    "_is_trusted", "_role_owns_queue", "_owns_queue", "_prove_caller", "_proven_caller",
    "_queue_objects", "_queue_privilege",
    "create_non_partitioned", "create_unlogged", "create",
    Policy("_create_queue_tables", upstream_path=True),
    Policy("_create_queue_for", upstream_path=True,
           definer_reason="queue tables belong to the extension's owner, so that no queue owner can attach "
           "code to them; it makes a validated queue for the caller proven by _prove_caller, who becomes "
           "its owner in queue_owners with table privileges only"),
    Policy("_drop_queue_tables",
           definer_reason="drops the tables (the extension owner's) of a queue whose owner is the caller "
           "proven by _prove_caller"),
    "drop_queue", "purge_queue", "list_queues", "detach_archive",
    # core: sending, reading, finishing, metrics
    "_check_headers", "send", "_validate_batch_params", "_send_batch", "send_batch",
    Policy("_delay_to_vt", upstream_path=True),
    "_note_priorities",
    Policy("_enable_priorities_for",
           definer_reason="builds the fixed (priority, msg_id) index on a table that belongs to the extension's "
           "owner and flags the queue, for a caller proven by _prove_caller who may send to it"),
    "enable_priorities",
    "read", "read_unordered", "read_with_poll", "pop", "delete", "archive", "set_vt",
    "ack_ranges",  # delivery: a batch consumer's set-based ack (features/delivery/functions/batch_ack)
    # core: each queue's hot statements as static SQL (templates/_macros/static_paths.sql.j2)
    "_static_send", "_static_send_dedup", "_static_send_batch", "_static_read", "_static_read_from", "_static_read_head", "_static_read_unordered", "_static_read_ranked", "_static_read_judged",
    "_static_read_judged_ranked", "_static_pop", "_static_pop_from", "_static_pop_head", "_static_pop_ranked", "_static_pop_judged",
    "_static_pop_judged_ranked", "_static_read_ttl", "_static_read_ttl_ranked", "_static_pop_ttl",
    "_static_pop_ttl_ranked", "_static_read_ttl_clean", "_static_read_ttl_clean_ranked", "_static_pop_ttl_clean",
    "_static_pop_ttl_clean_ranked", "_static_read_clean", "_static_read_clean_ranked", "_static_pop_clean",
    "_static_pop_clean_ranked", "_static_peek", "_static_hidden", "_static_claim_next", "_static_claim_next_ranked", "_static_delete", "_static_delete_one", "_static_archive", "_static_set_vt",
    "_static_path_tree",
    Policy("_rebuild_static_paths",
           definer_reason="the static paths belong to the extension's owner; it rewrites them from "
           "pgmq.meta alone (names quoted), so the result does not depend on who asks"),
    "_queues_changed",
    "metrics", "metrics_all",
    # delivery
    "set_retry_policy", "remove_retry_policy", "set_dedup_window", "set_message_ttl",
    "list_queue_settings",
    "_retry_delay", "_int_header", "_note_message_limits",
    Policy("_flag_message_limits",
           definer_reason="senders with access to a queue must be able to flag it (it only makes reads "
           "check per-message limits) without the right to change its settings; only for a caller proven "
           "by _prove_caller that may send to the queue"),
    "_check_dead_letter_queue", "_check_queue_settings",
    "_may_send_as",
    Policy("_dead_letter_written_here",
           definer_reason="the row security of dead_letter_origins asks whether this transaction wrote a dead "
           "letter that the recorder, a sender, may not read; it answers only about the caller's own rows"),
    "_dead_letter", "redrive", "_record_failure", "nack", "checkpoint",
    "_dedup_msg_id", "_confirm_by", "send_reserved", "confirm", "expire_messages",
    Policy("_forget_dedup_keys",
           definer_reason="a trigger (cannot be called directly): deletes only the dedup keys of the meta "
           "rows its statement deleted, which row security would hide once the queue's table is gone"),
    "set_delivery_counting", "_first_deliveries",
    # partitioned: each routine calling pg_partman is an unpinned outer function that keeps the
    # caller's search_path and a pinned inner one doing the work (create_partitioned.sql.j2)
    "_extension_schema", "_get_pg_partman_schema", "_get_pg_partman_major_version",
    "_ensure_pg_partman_installed", "_get_partition_col",
    Policy("create_partitioned", unpinned_reason=KEEPS_SEARCH_PATH),
    Policy("_create_partitioned", upstream_path=True),
    Policy("convert_archive_partitioned", unpinned_reason=KEEPS_SEARCH_PATH),
    Policy("_convert_archive_partitioned", upstream_path=True),
    Policy("run_partition_maintenance", unpinned_reason=KEEPS_SEARCH_PATH),
    "_run_partition_maintenance",
    Policy("_advance_read_floor",
           definer_reason="the read floor steers every read of a partitioned queue, so nobody else may write "
           "it (the settings trigger refuses); it reads every backend's transaction start, and what it writes "
           "depends on the queue's rows and sequence alone"),
    # fifo
    "_create_fifo_index_if_not_exists",
    Policy("_build_fifo_index",
           definer_reason="creates the FIFO index on a table that belongs to the extension's owner, "
           f"{PROVEN_OWNER}; the index definition is fixed"),
    "create_fifo_index", "create_fifo_indexes_all", "read_grouped", "read_grouped_with_poll",
    "read_grouped_rr", "read_grouped_rr_with_poll", "read_grouped_head", "read_grouped_head_with_poll",
    # routing: validation, the engine, exchanges (pgpro_queue's signatures first), upstream's topics
    "validate_routing_key", "validate_topic_pattern", "_validate_routing_key", "_validate_topic_pattern",
    "_topic_regex", "_headers_match", "_headers_arguments", "_may_publish", "_exchange_for_publish",
    "_route", "_unroutable", "_owns_role", "create_exchange", "drop_exchange", "set_unroutable",
    "_check_alternate_exchange", "_check_exchange",
    "list_exchanges", "list_exchange_bindings", "_bind", "_unbind", "bind_queue", "unbind_queue",
    "publish", "publish_routed", "test_exchange_routing", "bind_topic", "unbind_topic", "list_topic_bindings",
    "bind_stream", "unbind_stream",
    "test_routing", "send_topic", "send_batch_topic",
    # notify
    Policy("notify_queue_listeners",
           definer_reason="a trigger (cannot be called directly): senders advance the queue's throttle "
           "clock without the right to change its throttle settings; it ignores tables outside the schema"),
    Policy("_set_notify_trigger",
           definer_reason="creates or drops one of our two fixed notification triggers on a table that "
           f"belongs to the extension's owner, {PROVEN_OWNER}"),
    "enable_notify_insert", "disable_notify_insert", "update_notify_insert",
    "list_notify_insert_throttles", "_notify_msg_id", "enable_notify_msg_id", "disable_notify_msg_id",
    # payloads (the conversions pin more GUCs: templates/features/payloads/functions/types.sql.j2)
    "_payload_type_of", "_encode_payload", "_encode_payload_io", "_payload_ok", "_decode_payload",
    "_payload_type_untrusted",
    Policy("_set_payload_check",
           definer_reason="adds or drops the fixed payload CHECK constraint on a table that belongs to the "
           f"extension's owner, {PROVEN_OWNER}; trusted types only"),
    "set_payload_type", "payload_type", "send_payload", "read_payload", "pop_payload",
    # pgpro
    "queue_initialize", "queue_deinitialize", "create_queue", "alter_queue", "get_queue_table",
    "_xid_status", "_claim_message", "_take_message", "insert_message", "insert_message_xml",
    "publish_message", "publish_message_xml", "read_message", "read_message_xml", "read_message_by_id",
    "read_message_by_id_xml", "read_message_any", "read_message_by_id_any",
    # callbacks
    Policy("register_callback", unpinned_reason=CALLERS_PATH),
    Policy("unregister_callback", unpinned_reason=CALLERS_PATH),
    "_register_callback", "_unregister_callback",
    Policy("_make_callback_runner",
           definer_reason="creates a role's callback runner (a fixed SECURITY DEFINER function) in the "
           "schema and hands it to that role, for a proven caller that may act as it, so that callbacks "
           "run with their registrant's rights"),
    "list_callbacks", "_dispatch_one", "_dispatch_one_detail", "_callback_queues",
    Policy("dispatch", commits=True,
           unpinned_reason="commits once per message, so one failing callback never undoes another"),
    # ops
    "pause", "resume", "_sample_messages", "_count_rows", "_count_messages", "_queue_metrics_of", "queue_metrics",
    "queue_metrics_page",
    "browse", "move_messages",
    Policy("sample_metrics",
           definer_reason="writes queue_metrics() of every queue into metrics_history, a table only the "
           "extension's owner may write, so that no row is forged; not granted to PUBLIC (pg_monitor, which "
           "reads every queue already, may call it), so that no tenant fills the table; nothing the caller "
           "gives but the two bounds, checked against fixed ranges"),
    "metrics_history",
    # streams
    Policy("_create_stream_for",
           definer_reason="stream tables belong to the extension's owner, so that no stream owner can attach "
           "code to them; it makes a validated stream for the caller proven by _prove_caller, who becomes "
           "its owner with SELECT and INSERT only"),
    "create_stream",
    Policy("_drop_stream_for",
           definer_reason="drops the tables (the extension owner's) of a stream whose owner is the caller "
           "proven by _prove_caller"),
    "drop_stream", "list_streams", "_stream_append",
    Policy("stream_send",
           unpinned_reason="the hot path of a producer: SET search_path costs ~6 µs a call, 15% of a raw "
           "INSERT (README, Performance); its body and the static paths written into it qualify every "
           "name, type, operator and collation"),
    "stream_send_batch", "_stream_events",
    Policy("_rebuild_stream_paths",
           definer_reason="stream_send and stream_send_batch belong to the extension's owner; it rewrites "
           "them from pgmq.streams alone (names quoted), so the result does not depend on who asks"),
    "_heal_stream_paths", "_streams_changed", "_stream_privilege",
    "_stream_last_ev_id", "_stream_news",
    Policy("_stream_tick",
           definer_reason="PUBLIC cannot write ticks; a tick is a snapshot and a counter of the named stream, "
           "nothing the caller gives but the name"),
    Policy("_stream_maintain",
           definer_reason="rotates and drops segment tables (the extension owner's) by the stream's own "
           "settings and the clock; nothing the caller gives but the name"),
    "_stream_count_unseen", "stream_tick", "subscribe", "unsubscribe", "stream_read",
    "_stream_settle", "stream_ack", "stream_nack", "stream_rewind", "stream_info",
    "_guard_stream_subscription",
    "_stream_acl", "_stream_holds", "_copy_stream_acl",
    Policy("_set_stream_access",
           definer_reason="grants and revokes privileges on a stream's tables and sequence (the extension "
           "owner's) for the stream's owner, the caller proven by _prove_caller; only the fixed read and "
           "write privileges"),
    "grant_stream_access", "revoke_stream_access",
    # access
    Policy("_set_queue_access",
           definer_reason="grants and revokes privileges on tables that belong to the extension's owner, "
           f"{PROVEN_OWNER}; only the fixed table privileges of a queue"),
    "grant_queue_access", "revoke_queue_access", "reset_queue_access", "grant_publish_access",
    "revoke_publish_access",
)

# Upstream PGMQ 1.13's routines, as PostgreSQL prints them: the contract our routines of the same
# identity keep, argument names and defaults included (lint PGMQ012; they are "upstream" in
# docs/api.txt and raise only upstream's errors, PGMQ011). Derived once from upstream's own SQL
# (tests/unit/test_upstream_steps.py re-derives it from the PyPI package pgmq's pgmq.sql).
UPSTREAM_CONTRACT_FILE = Path(__file__).with_name("upstream-pgmq-1.13.txt")
UPSTREAM_CONTRACT = tuple(line for line in UPSTREAM_CONTRACT_FILE.read_text().splitlines()
                          if line.strip() and not line.startswith("#"))

# Features in render order.
MANIFEST = Manifest(version=VERSION, schema=SCHEMA, released=RELEASED,
                    features=(CORE, DELIVERY, PARTITIONED, FIFO, STREAMS, ROUTING, NOTIFY, PAYLOADS,
                              PGPRO, CALLBACKS, OPS, ACCESS),
                    upstream=UPSTREAM_VERSIONS, routines=ROUTINES, contract=UPSTREAM_CONTRACT)
