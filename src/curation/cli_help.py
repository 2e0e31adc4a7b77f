"""What ``curate --help`` lists and what ``curate --describe <key>`` prints.

``--help`` is Hydra's application help, customised in ``conf/config.yaml`` (``hydra.help``, Hydra's
"Customizing Application's help"). Its prose lives there; the lists in it are not written out by hand but
computed when Hydra resolves the template (the ``${curate_help:<section>}`` resolver,
:func:`register_help_resolver`), from ``conf/`` and the pipeline modules: a new
experiment or pipeline appears in the help without anyone editing it, and one removed disappears (a help
that names a deleted experiment is worse than none). Names starting with ``_`` (the ``_schema*`` entries,
``experiment/_reduced_scale``) are the config's internals and are left out.

``--describe`` answers "what is this knob?" without opening three files: the composed value, its type and
the comments that explain it, from the schema dataclass (``curation.config_schema``) and from the YAML
files that set it. Both read source text only (no pipeline is imported, nothing runs), so they are quick.
"""

from __future__ import annotations

import ast
import inspect
import io
import re
import textwrap
import tokenize
import typing
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

NAME_WIDTH = 34  # column of the one-line descriptions
LINE_WIDTH = 118  # a help line is cut here (one line per experiment, whatever its comment's length)


def _private(name: str) -> bool:
    return name.startswith("_")


# "Fig. 3", "Sec. 4.3", "App. A.5": a period that does not end a sentence
_ABBREVIATIONS = ("Fig", "Figs", "Sec", "App", "Alg", "Eq", "Eqs", "Tab", "No", "vs", "cf", "e.g", "i.e", "approx")
_SENTENCE_END = re.compile(r"(?<![A-Z])\.(?=\s+[A-Z(]|$)")


def _one_line(text: str, width: int) -> str:
    """The first sentence of ``text`` on one line, cut at a word before ``width`` characters."""
    text = " ".join(text.split())
    for match in _SENTENCE_END.finditer(text):
        if not text[: match.start()].endswith(_ABBREVIATIONS):
            text = text[: match.start()]
            break
    return textwrap.shorten(text, width=width, placeholder=" ...") if len(text) > width else text


def yaml_description(path: Path) -> str:
    """The description of a config file: its leading comment block (after ``# @package``), up to the first
    ``Run:``/``Report:`` line or blank comment; '' when the file opens with no comment."""
    lines = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line.startswith("#"):
            break
        body = line.lstrip("#").strip()
        if body.startswith("@package"):
            continue
        if not body or re.match(r"^(Run|Report|Paper scale)\b.*:", body):
            if lines:
                break
            continue
        lines.append(body)
    return " ".join(lines)


def experiments(conf: Path) -> list[tuple[str, str]]:
    """``(name, description)`` of every public experiment, ``conf/experiment/<name>.yaml``."""
    return [(p.stem, yaml_description(p)) for p in sorted((conf / "experiment").glob("*.yaml"))
            if not _private(p.stem)]


def known_pipelines() -> list[str]:
    """The pipelines Kedro's ``find_pipelines`` can register: one package per pipeline under
    ``curation.pipelines``, and ``__default__``. Plain modules there (``tokenizer.py``, a node several
    pipelines share) are not pipelines: ``find_pipelines`` takes only the sub-packages."""
    import pkgutil

    import curation.pipelines

    return sorted({m.name for m in pkgutil.iter_modules(curation.pipelines.__path__) if m.ispkg} | {"__default__"})


def _module_doc(path: Path) -> str:
    try:
        return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    except (OSError, SyntaxError):
        return ""


def pipelines() -> list[tuple[str, str]]:
    """``(name, description)`` of every pipeline the registry can register: the same modules Kedro's
    ``find_pipelines`` discovers (:func:`known_pipelines`), each described by the first
    line of its ``pipeline.py`` docstring, read as text (importing them loads torch: seconds)."""
    import curation.pipelines

    folder = Path(curation.pipelines.__path__[0])
    out = []
    for name in known_pipelines():
        if name == "__default__":
            out.append((name, "the default job: " + " -> ".join(_default_pipelines()) + " (what `curate` runs)"))
            continue
        doc = _module_doc(folder / name / "pipeline.py") or _module_doc(folder / name / "__init__.py")
        first = doc.strip().splitlines()[0] if doc.strip() else ""
        out.append((name, re.sub(rf"^{re.escape(name)}\s*:\s*", "", first)))
    return out


def _default_pipelines() -> tuple[str, ...]:
    """``curation.pipeline_registry.DEFAULT_PIPELINES``, read from its source: importing the registry imports
    ``kedro.framework.project``, which configures logging and prints a line above the help."""
    import curation

    source = (Path(curation.__path__[0]) / "pipeline_registry.py").read_text(encoding="utf-8")
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "DEFAULT_PIPELINES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise LookupError("DEFAULT_PIPELINES is not in curation/pipeline_registry.py")


def groups(conf: Path) -> list[tuple[str, list[str]]]:
    """``(group, options)`` of every config group folder of ``conf/`` but ``experiment`` (listed apart),
    private options left out."""
    out = []
    for folder in sorted(p for p in conf.iterdir() if p.is_dir()):
        options = sorted(p.stem for p in folder.glob("*.yaml") if not _private(p.stem))
        if options and folder.name != "experiment":
            out.append((folder.name, options))
    return out


def _rows(rows: Iterable[tuple[str, str]]) -> str:
    lines = []
    for name, text in rows:
        lead = f"  {name}".ljust(NAME_WIDTH) if len(name) + 2 < NAME_WIDTH else f"  {name}  "
        lines.append(lead + _one_line(text, LINE_WIDTH - len(lead)))
    return "\n".join(lines)


def help_section(section: str, conf: Optional[Path] = None) -> str:
    """One generated part of ``curate --help``: ``pipelines``, ``experiments`` or ``groups``.

    Hydra formats the template with :class:`string.Template` after resolving it, so a ``$`` of a
    description is doubled here (it would otherwise be read as a placeholder)."""
    from curation.paths import project_root

    conf = conf or project_root() / "conf"
    if section == "pipelines":
        text = _rows(pipelines())
    elif section == "experiments":
        text = _rows(experiments(conf))
    elif section == "groups":
        text = "\n".join(textwrap.fill(", ".join(options), width=LINE_WIDTH, initial_indent=f"  {group}: ",
                                       subsequent_indent=" " * (len(group) + 4)) for group, options in groups(conf))
    else:
        raise ValueError(f"curate_help: unknown section {section!r} (pipelines, experiments, groups)")
    return text.replace("$", "$$")


def register_help_resolver() -> None:
    """``${curate_help:pipelines|experiments|groups}``, the resolver of ``hydra.help.template`` (conf/config.yaml).
    ``curate`` registers it before Hydra starts; nothing else resolves the ``hydra`` node."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("curate_help", help_section, replace=True)


# --- curate --describe <key> ---


def _comments(source: str) -> tuple[dict[int, str], set[int]]:
    """``{line: comment text}`` of ``source`` and the lines that hold code (1-based)."""
    comments, code = {}, set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = tok.string.lstrip("#").strip()
            elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                                  tokenize.ENDMARKER):
                code.update(range(tok.start[0], tok.end[0] + 1))
    except (tokenize.TokenError, IndentationError):
        pass
    return comments, code


def _attached(comments: dict[int, str], code: set[int], line: int) -> str:
    """The comment block right above ``line`` (comment-only lines, no blank line between) and the comment
    at its end."""
    above, up = [], line - 1
    while up in comments and up not in code:
        above.insert(0, comments[up])
        up -= 1
    inline = [comments[line]] if line in comments and line in code else []
    return " ".join(above + inline).strip()


def schema_comment(cls: type, name: str) -> tuple[str, str]:
    """``(comment, "module.Class")`` of field ``name`` of dataclass ``cls`` (or the base class that declares
    it); ``("", "")`` when no source is found."""
    for klass in getattr(cls, "__mro__", ()):
        if name not in getattr(klass, "__annotations__", {}):
            continue
        try:
            lines, start = inspect.getsourcelines(klass)
        except (OSError, TypeError):
            continue
        source = textwrap.dedent("".join(lines))
        comments, code = _comments(source)
        for number, text in enumerate(source.splitlines(), 1):
            if re.match(rf"^\s+{re.escape(name)}\s*:", text):
                return _attached(comments, code, number), f"{klass.__module__}.{klass.__qualname__}"
    return "", ""


def _schema_classes() -> dict[str, type]:
    """Every schema dataclass by name, nested ones included: the composed config's nodes carry the class
    Hydra stored, which :func:`~curation.config_schema.hydra_node` may have rebuilt without source."""
    from curation.config_schema import _schemas

    found: dict[str, type] = {}

    def walk(cls: Any) -> None:
        if not (isinstance(cls, type) and is_dataclass(cls)) or cls.__name__ in found:
            return
        found[cls.__name__] = cls
        try:
            hints = typing.get_type_hints(cls)
        except Exception:
            return
        for f in fields(cls):
            for arg in (hints.get(f.name), *typing.get_args(hints.get(f.name))):
                walk(arg)

    for schema in _schemas().values():
        for cls in (schema.values() if isinstance(schema, dict) else [schema]):
            walk(cls)
    return found


def _yaml_keys(path: Path) -> dict[str, tuple[int, str]]:
    """``{dotted key: (line, comment)}`` of a block-style YAML file, the key path relative to the file's
    package. A small indentation reader: the config files are plain block mappings, and PyYAML drops
    comments."""
    out: dict[str, tuple[int, str]] = {}
    stack: list[tuple[int, str]] = []
    above: list[str] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = raw.strip()
        if not stripped:
            above = []
            continue
        if stripped.startswith("#"):
            above.append(stripped.lstrip("#").strip())
            continue
        match = re.match(r"^(\s*)([A-Za-z_][\w.\-]*)\s*:(\s|$)", raw)
        if not match:
            above = []
            continue
        indent, key = len(match.group(1)), match.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        inline = raw.split(" #", 1)[1].strip() if " #" in raw else ""
        out[".".join(k for _, k in stack)] = (number, " ".join(above + ([inline] if inline else [])).strip())
        above = []
    return out


def _package(path: Path, default: str) -> str:
    for raw in path.read_text(encoding="utf-8").splitlines()[:5]:
        match = re.match(r"^#\s*@package\s+(\S+)", raw.strip())
        if match:
            return "" if match.group(1) == "_global_" else match.group(1)
    return default


def _option_files(conf: Path, group: str, option: str, seen: set[Path]) -> list[Path]:
    """``conf/<group>/<option>.yaml`` after the options of its group it lists in ``defaults`` (set first,
    overridden by it)."""
    import yaml

    path = conf / group / f"{option}.yaml"
    if not path.is_file() or path in seen:
        return []
    seen.add(path)
    try:
        defaults = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("defaults") or []
    except (yaml.YAMLError, AttributeError):
        defaults = []
    before = []
    for entry in defaults:
        if isinstance(entry, str) and not _private(entry) and entry != "_self_":
            before += _option_files(conf, group, entry, seen)
    return before + [path]


def yaml_comments(conf: Path, key: str, choices: dict[str, Any]) -> list[tuple[Path, int, str]]:
    """Where ``key`` is set in the YAML files the composition read, in the order they apply (the primary
    config, the chosen option of each group, the experiment), each with the comment written there."""
    files: list[tuple[Path, str]] = [(conf / "config.yaml", "")]
    for group, option in choices.items():
        if option is None or "/" in group or group == "hydra":
            continue
        for path in _option_files(conf, group, str(option), set()):
            files.append((path, _package(path, group)))
    found = []
    for path, package in files:
        rel = key[len(package) + 1:] if package and key.startswith(package + ".") else (key if not package else None)
        if rel is None:
            continue
        entry = _yaml_keys(path).get(rel)
        if entry is not None:
            found.append((path, entry[0], entry[1]))
    return found


@dataclass
class Description:
    key: str
    value: Any
    type: str
    schema: str  # the schema field's comment
    schema_class: str
    yaml: list[tuple[Path, int, str]]


def _type_name(tp: Any, optional: bool) -> str:
    name = getattr(tp, "__name__", None) if isinstance(tp, type) else None
    name = name or str(tp).replace("typing.", "")
    return f"{name} or null" if optional and name != "Any" else name


def describe(cfg: Any, key: str, conf: Path) -> Description:
    """The composed value of ``key`` in ``cfg`` (composed with ``return_hydra_config=True``), its declared
    type and its comments. Raises ``KeyError`` for a key the config does not have."""
    from omegaconf import OmegaConf

    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
    if parent is None or not OmegaConf.is_config(parent) or leaf not in parent:
        raise KeyError(key)
    node = parent._get_node(leaf)
    ref = node._metadata.ref_type
    value = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node._value()
    try:
        if not OmegaConf.is_config(node):
            value = parent[leaf]  # resolved
    except Exception:
        pass
    if ref is Any or ref is None:
        tp = "mapping" if OmegaConf.is_dict(node) else "list" if OmegaConf.is_list(node) else \
            type(value).__name__ if value is not None else "any"
    else:
        tp = _type_name(ref, node._is_optional())
    comment, where = "", ""
    owner = getattr(parent._metadata, "object_type", None) if OmegaConf.is_dict(parent) else None
    if isinstance(owner, type) and is_dataclass(owner):
        cls = _schema_classes().get(owner.__name__, owner)
        comment, where = schema_comment(cls, leaf)
    choices = dict(OmegaConf.select(cfg, "hydra.runtime.choices", default={}) or {})
    return Description(key, value, tp, comment, where, yaml_comments(conf, key, choices))


def _leaves(cfg: Any, prefix: str) -> list[str]:
    from omegaconf import OmegaConf

    node = OmegaConf.select(cfg, prefix) if prefix else cfg
    if not OmegaConf.is_dict(node):
        return [prefix]
    out = []
    for name in node.keys():
        if not prefix and name == "hydra":
            continue
        full = f"{prefix}.{name}" if prefix else str(name)
        child = node._get_node(name)
        if OmegaConf.is_dict(child) and len(child):
            out += _leaves(cfg, full)
        else:
            out.append(full)
    return out


def _short(value: Any, width: int = 60) -> str:
    """``value`` as it is written in YAML and on the command line (null, true, [a, b]), cut at ``width``."""
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
    text = text.removesuffix("\n...").removesuffix("...").strip()
    return text if len(text) <= width else text[: width - 4] + " ..."


def format_description(d: Description, root: Path) -> str:
    """The text ``curate --describe <leaf key>`` prints."""
    lines = [f"{d.key} = {_short(d.value, 400)}", f"  type:    {d.type}"]
    if d.schema:
        lines += textwrap.wrap(d.schema, width=LINE_WIDTH, initial_indent="  schema:  ",
                               subsequent_indent=" " * 11)
    if d.schema_class:
        lines.append(f"           ({d.schema_class})")
    for path, line, comment in d.yaml:
        rel = path.relative_to(root) if path.is_relative_to(root) else path
        lines.append(f"  set in:  {rel}:{line}")
        if comment and comment != d.schema:
            lines += textwrap.wrap(comment, width=LINE_WIDTH, initial_indent="           # ",
                                   subsequent_indent="           # ")
    if not d.schema and not any(c for _, _, c in d.yaml):
        lines.append("  (no description in the schema or the YAML)")
    return "\n".join(lines)


def format_node(cfg: Any, prefix: str, conf: Path) -> str:
    """The text ``curate --describe [<node>]`` prints for a mapping: every key below it, one line each,
    ``key = value  # description`` (the schema's comment, else the YAML's)."""
    lines = []
    for key in _leaves(cfg, prefix):
        try:
            d = describe(cfg, key, conf)
        except KeyError:
            continue
        text = d.schema or next((c for _, _, c in reversed(d.yaml) if c), "")
        left = f"{key} = {_short(d.value)}"
        lines.append(left + (f"  # {_one_line(text, max(40, LINE_WIDTH - len(left) - 4))}" if text else ""))
    return "\n".join(lines)


def describe_main(argv: list[str], root: Path) -> int:
    """``curate --describe [<key>] [override ...]``: compose the config with the overrides (and the real
    schemas), print the key's value, type and descriptions (a mapping: each key below it, one line each).
    Returns the exit status (2: no such key, or the overrides do not compose)."""
    import sys

    from hydra import compose

    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from curation.config_schema import register_configs
    from curation.errors import composition_message, format_failure

    args = [a for a in argv if a != "--describe"]
    key = args.pop(0) if args and "=" not in args[0] else ""
    conf = root / "conf"
    register_configs()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf.resolve()), version_base="1.3"):
            cfg = compose(config_name="config", overrides=args, return_hydra_config=True)
    except Exception as err:
        print(format_failure(composition_message(err) or str(err)), file=sys.stderr)
        return 2
    from omegaconf import OmegaConf

    node = OmegaConf.select(cfg, key) if key else cfg
    if key and node is None and not _exists(cfg, key):
        print(format_failure(f"--describe {key}: no such key in the composed config. Fix: name one of "
                             f"`curate --cfg job`'s keys, e.g. selection.steps or data.path"), file=sys.stderr)
        return 2
    if OmegaConf.is_dict(node):
        print(format_node(cfg, key, conf))
    else:
        print(format_description(describe(cfg, key, conf), root))
    return 0


def _exists(cfg: Any, key: str) -> bool:
    from omegaconf import OmegaConf

    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
    return OmegaConf.is_dict(parent) and leaf in parent
