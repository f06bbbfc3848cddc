"""MkDocs hook: docstrings cite names with Sphinx roles (:class:`Dataset`); the API
reference shows the name as code, without the role."""

import re

_ROLE = re.compile(r":(?:py:)?(?:attr|class|data|exc|func|meth|mod|obj):(?=<code>)")


def on_page_content(html, page, config, files):
    return _ROLE.sub("", html)
