"""The asynchronous API: several commands of one session at once, on one event loop."""

import asyncio

import panday.aio


async def main() -> None:
    async with panday.aio.open() as session:
        results = await asyncio.gather(
            session.run(["sh", "-c", "sleep 0.2; echo one"]),
            session.run(["sh", "-c", "sleep 0.2; echo two"]),
        )
        print([r.stdout.decode().strip() for r in results], session.tier)
        assert [r.stdout for r in results] == [b"one\n", b"two\n"]
        for guarantee in session.guarantees()[:3]:
            print(f"{guarantee.support.value:8} {guarantee.name}")


asyncio.run(main())
