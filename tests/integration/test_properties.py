import hashlib, uuid, pytest
from services.client import ChronicleError
from services.bootstrap import bootstrap
from tests.conftest import make_settings

async def test_lexeme(connect):
    b_id = f"user-{uuid.uuid4().hex[:12]}"
    a, b = await connect(), await connect(b_id)
    s = await a.conversations.start(title="secret")
    await a.conversations.add_message(s.conversation_id, "user", "zebra owner" + hashlib.md5(b_id.encode()).hexdigest())
    await b.conversations.start(title="mine")
    print((await b.conversations.search("zebra")).items)

async def test_nul(servers, tmp_path):
    with servers.fresh_database() as url:
        inst = await bootstrap(make_settings(url, servers.nats_url, tmp_path, query_wait_timeout=2.0))
        try:
            from services.client import ChronicleClient
            from adapters.auth import TokenAuthority
            from tests.conftest import JWT_SECRET
            c = await ChronicleClient.connect(inst.nats_url, TokenAuthority(secret=JWT_SECRET).issue("u1"), prefix=inst.settings.subject_prefix)
            s = await c.conversations.start(title="x")
            r = await c.conversations.add_message(s.conversation_id, "user", "a\x00b")
            print("added", r)
            try:
                print(await c.conversations.get(s.conversation_id))
            except ChronicleError as e:
                print("ERR", e.code, e)
            c2 = await ChronicleClient.connect(inst.nats_url, TokenAuthority(secret=JWT_SECRET).issue("u2"), prefix=inst.settings.subject_prefix)
            s2 = await c2.conversations.start(title="innocent")
            try:
                print(await c2.conversations.list())
            except ChronicleError as e:
                print("ERR2", e.code, e)
            await c.close(); await c2.close()
        finally:
            await inst.stop()
