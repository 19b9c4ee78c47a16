"""The language plumbing: texts go through gettext per task, and templates can say `_()`."""

from __future__ import annotations

import asyncio
import gettext

import aiohttp_jinja2
from aiohttp import web

from cvsm_server.core import i18n
from cvsm_server.web.pages import kit


class _English(gettext.NullTranslations):
    def gettext(self, message: str) -> str:
        return {"Tim": "Teams"}.get(message, message)


def test_each_task_keeps_its_own_language():
    i18n.install("en", _English())

    async def read(language: str) -> str:
        i18n.set_language(language)
        await asyncio.sleep(0)
        return i18n.gettext("Tim")

    async def both() -> list[str]:
        return await asyncio.gather(read("en"), read("id"), read("xx"))

    assert asyncio.run(both()) == ["Teams", "Tim", "Tim"]
    assert i18n.gettext("Tim") == "Tim"  # this thread's context was never changed


def test_templates_translate_through_the_current_language():
    i18n.install("en", _English())
    app = web.Application()
    kit.setup(app)
    env = aiohttp_jinja2.get_env(app)
    template = env.from_string('{{ _("Tim") }} / {% trans %}Tim{% endtrans %} / {{ _("Halo %(name)s", name=who) }}')
    with i18n.use_language("en"):
        assert template.render(who="<b>") == "Teams / Teams / Halo &lt;b&gt;"
    assert template.render(who="<b>") == "Tim / Tim / Halo &lt;b&gt;"  # values stay escaped
