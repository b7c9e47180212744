"""A rewrite's ``where`` predicate: parsed with a SQL parser before any gate closes, and translated for dry runs.

Iceberg's rewrite procedures take ``where`` as Spark SQL text and parse it themselves, inside Spark, after the
gate has closed. A predicate Spark cannot use would pause the writer for nothing, so every predicate is parsed
here first with sqlglot's Spark dialect (:func:`parse_predicate`): it must be one boolean expression (no
statement separator, no query, no function or procedure call, no comment, no table-qualified column), and every
column it names must be one of the table's (:func:`check_columns`, against the schema pyiceberg reads). A dry
run applies the same predicate to the table's metadata through pyiceberg (:func:`to_pyiceberg`); one it cannot
translate, or whose values do not fit their columns, fails, naming the predicate, instead of silently listing the
whole table.

The text that reaches Spark is the text given, unchanged: parsing is a check, never a rewrite.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timezone
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from airflow_iceberg.core.tables import shown
from airflow_iceberg.exceptions import PredicateError, PredicateTypeError
from airflow_iceberg.planning.templates import holds_template

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.schema import Schema

#: Nodes that make a predicate something other than a filter on the table's own rows.
_FORBIDDEN = (exp.Query, exp.Subquery, exp.Command, exp.DDL, exp.DML, exp.Table, exp.Placeholder, exp.Parameter)
#: Spark SQL as sqlglot reads it.
_SPARK = Dialect.get_or_raise("spark")
#: What a predicate's top must be: a comparison, IN, IS, BETWEEN, LIKE, AND/OR, NOT, or a boolean constant.
_BOOLEAN_ROOTS = (exp.Predicate, exp.Connector, exp.Not, exp.Boolean)


@dataclass(frozen=True)
class Predicate:
    """A parsed ``where``: its text as given, its syntax tree, and the column names it uses."""

    text: str
    tree: exp.Expression
    columns: tuple[str, ...]


def parse_predicate(text: object, *, what: str = "where", rendered: bool = False) -> Predicate:
    """Parse ``text`` as one Spark SQL boolean expression over the table's columns, or raise :class:`PredicateError`.

    ``what`` names the predicate in messages (``"param 'where'"``, ``"the table's where"``, ...). ``rendered`` says
    that ``text`` was rendered from the table list's template; a run's own ``where`` is not (``rendered=False``):
    it is taken as written, so one that holds a template is refused, and no advice points it at templates.
    """
    if not isinstance(text, str):
        raise PredicateError(f"{what} must be a Spark SQL predicate string, got {shown(text)}")
    if not text.strip():
        raise PredicateError(
            f"{what} is empty ({text!r}): give a predicate such as dt >= '20261120', or leave it unset to use the "
            "DAG's own (an empty predicate is never taken to mean the whole table)"
        )
    quoted = shown(text)
    if not rendered and holds_template(text):
        raise PredicateError(
            f"{what} {quoted} holds a template, but a run's own where is taken as written, never rendered: write "
            "the value itself, such as dt >= '2026-11-25' (templates belong in the table list's where, which is "
            "rendered for each run)"
        )
    try:  # tokenized once: the checks below read the same tokens the parser did
        tokens = _SPARK.tokenize(text)
        statements = _SPARK.parser().parse(tokens, text)
    except (ParseError, TokenError) as error:
        raise PredicateError(f"{what} {quoted} is not valid Spark SQL: {_syntax_advice(text, error)}") from None
    if any(token.token_type is TokenType.SEMICOLON for token in tokens):
        count = len([s for s in statements if s is not None])
        after = " and what follows it" if count > 1 else ""
        raise PredicateError(
            f"{what} {quoted} must be one condition, but it holds a ';' ({count} statement{'s' * (count != 1)}): "
            f"remove the ';'{after}. The procedure takes the condition alone."
        )
    tree = statements[0]
    if tree is None:
        raise PredicateError(f"{what} {quoted} holds no condition: give one, such as dt >= '2026-11-20'")
    if isinstance(tree, exp.Command) and str(tree.this).upper() == "CALL":
        raise PredicateError(
            f"{what} {quoted} is a procedure CALL, not a condition: the DAG calls Iceberg's procedures itself. "
            "Give only the condition on the table's rows, such as dt >= '2026-11-20'."
        )
    forbidden = next((node for node in tree.walk() if isinstance(node, _FORBIDDEN)), None)
    if forbidden is not None:
        kind = type(forbidden).__name__.lower()
        raise PredicateError(
            f"{what} {quoted} must filter the table's rows, not hold a {kind}: {shown(forbidden.sql())}. Compare "
            "the table's columns with literal values."
        )
    call = next((node for node in tree.walk() if _function_call(node)), None)
    if call is not None:
        # Spark would run it: java_method() and reflect() call any Java code, and Iceberg cannot use most others.
        advice = (
            "; in the table list, a template such as '{{ macros.ds_add(ds, -2) }}' computes a date for each run"
            if rendered
            else " (a run's own where is taken as written, never rendered)"
        )
        raise PredicateError(
            f"{what} {quoted} calls the function {_called(tokens, call)!r}, which Spark would run and Iceberg "
            "cannot use to select files: compare the columns with literal values, such as DATE '2026-11-20' or "
            f"TIMESTAMP '2026-11-20 00:00:00'{advice}"
        )
    if any(token.comments for token in tokens):
        # Joined with the plan's partitions, a '--' comment would swallow the rest of the predicate.
        raise PredicateError(f"{what} {quoted} holds a comment: write the predicate alone")
    if not isinstance(tree.unnest(), _BOOLEAN_ROOTS):
        raise PredicateError(
            f"{what} {quoted} is not a condition (true or false for each row): compare a column with a value, "
            "such as dt >= '2026-11-20'"
        )
    columns = []
    for column in tree.find_all(exp.Column, bfs=False):  # in the order written
        if column.table:
            raise PredicateError(
                f"{what} {quoted} qualifies column {column.sql()!r}: name the table's columns alone, such as "
                f"{column.name!r}"
            )
        if column.name not in columns:
            columns.append(column.name)
    return Predicate(text=text, tree=tree, columns=tuple(columns))


def _syntax_advice(text: str, error: Exception) -> str:
    """What to change in ``text``, which sqlglot could not read: an unclosed quote, unbalanced parentheses, or
    else where sqlglot stopped."""
    quote, opened, opens, closes = None, 0, 0, 0
    index = 0
    while index < len(text):
        char = text[index]
        if quote is not None:
            if char == "\\" and quote != "`":
                index += 1  # an escaped character
            elif char == quote:
                if text[index + 1 : index + 2] == quote:
                    index += 1  # a doubled quote stands for itself
                else:
                    quote = None
        elif char in "'\"`":
            quote, opened = char, index
        elif char == "(":
            opens += 1
        elif char == ")":
            closes += 1
        index += 1
    if quote is not None:
        return (
            f"the {quote} at character {opened + 1} opens a {'name' if quote == '`' else 'string'} that is never "
            f"closed: add the closing {quote}"
        )
    if opens != closes:
        return f"its parentheses do not balance ({opens} '(' and {closes} ')'): add the missing one"
    first: dict[str, Any] = next(iter(getattr(error, "errors", None) or []), {})
    column = first.get("col")
    near = f" near character {column} ({shown(text[max(column - 1, 0) :][:20])})" if column else ""
    return f"it cannot be read{near}: write one condition on the table's columns, such as dt >= '2026-11-20'"


def _called(tokens: list[Any], call: exp.Expression) -> str:
    """The name of the function ``call`` as the text writes it (sqlglot may rename it: date_sub to DATE_ADD)."""
    for token, following in pairwise(tokens):
        if token.token_type is TokenType.VAR and following.token_type is TokenType.L_PAREN:
            return token.text
    return call.sql(dialect="spark")


def check_columns(predicate: Predicate, schema: Schema, table: object, *, what: str = "where") -> None:
    """Raise :class:`PredicateError` if ``predicate`` names a column ``schema`` lacks (case-insensitive, as Spark)."""
    unknown = [name for name in predicate.columns if _field(schema, name) is None]
    if unknown:
        known = ", ".join(field.name for field in schema.fields)
        raise PredicateError(
            f"{what} {predicate.text!r} names {', '.join(repr(n) for n in unknown)}, which table {table} does not "
            f"have; its columns: {known}"
        )


def to_pyiceberg(predicate: Predicate, schema: Schema, *, what: str = "where") -> BooleanExpression:
    """The same selection as a pyiceberg row filter, or :class:`PredicateError` naming the predicate and the part
    pyiceberg cannot evaluate from metadata (a function call, a comparison of two columns, ...)."""
    from pyiceberg.expressions.visitors import bind

    try:
        expression = _Translator(schema).convert(predicate.tree)
        bind(schema, expression, case_sensitive=False)  # a value of the wrong type for its column fails here
    except _Untranslatable as error:
        raise PredicateError(
            f"{what} {predicate.text!r} cannot be applied to the table's metadata for a dry run: {error}"
        ) from None
    except (TypeError, ValueError) as error:
        raise PredicateTypeError(f"{what} {predicate.text!r} does not fit the table's columns: {error}") from None
    return expression


class _Untranslatable(Exception):
    pass


def _function_call(node: exp.Expression) -> bool:
    """Whether ``node`` calls a function. AND and OR are functions to sqlglot, and ``DATE '...'`` or
    ``TIMESTAMP '...'`` is a cast of a string literal, which is a value: none of them is."""
    if not isinstance(node, exp.Func) or isinstance(node, exp.Connector):
        return False
    return not (type(node) is exp.Cast and isinstance(node.this, exp.Literal) and node.this.is_string)


def _pyiceberg_expressions() -> Any:
    """pyiceberg's expressions, imported when a predicate is applied (the DAG files never load pyiceberg).

    Typed as Any: they are pydantic models whose ``__init__`` takes ``(term, value)`` positionally, as pyiceberg
    documents, while mypy reads their field list as the signature.
    """
    from pyiceberg import expressions

    return expressions


def _field(schema: Schema, name: str) -> Any:
    try:
        return schema.find_field(name, case_sensitive=False)
    except ValueError:
        return None


class _Translator:
    """sqlglot's tree -> pyiceberg's expressions, for the filters a partition predicate is made of."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema

    def convert(self, node: exp.Expression) -> BooleanExpression:
        ice = _pyiceberg_expressions()
        node = node.unnest()
        if isinstance(node, exp.And):
            return ice.And(self.convert(node.this), self.convert(node.expression))
        if isinstance(node, exp.Or):
            return ice.Or(self.convert(node.this), self.convert(node.expression))
        if isinstance(node, exp.Not):
            return ice.Not(self.convert(node.this))
        if isinstance(node, exp.Boolean):
            return ice.AlwaysTrue() if node.this else ice.AlwaysFalse()
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
            return ice.IsNull(self._column(node.this)[0])
        if isinstance(node, exp.In) and not node.args.get("query"):
            name, field = self._column(node.this)
            return ice.In(name, {self._value(value, field) for value in node.expressions})
        if isinstance(node, exp.Between):
            name, field = self._column(node.this)
            low, high = self._value(node.args["low"], field), self._value(node.args["high"], field)
            return ice.And(ice.GreaterThanOrEqual(name, low), ice.LessThanOrEqual(name, high))
        if isinstance(node, exp.Like):
            return self._starts_with(node)
        comparisons: dict[type[exp.Expression], tuple[Any, Any]] = {
            exp.EQ: (ice.EqualTo, ice.EqualTo),
            exp.NEQ: (ice.NotEqualTo, ice.NotEqualTo),
            exp.GT: (ice.GreaterThan, ice.LessThan),
            exp.GTE: (ice.GreaterThanOrEqual, ice.LessThanOrEqual),
            exp.LT: (ice.LessThan, ice.GreaterThan),
            exp.LTE: (ice.LessThanOrEqual, ice.GreaterThanOrEqual),
        }
        if type(node) in comparisons:
            as_written, flipped = comparisons[type(node)]
            left, right = node.this.unnest(), node.expression.unnest()
            if isinstance(left, exp.Column):
                name, field = self._column(left)
                return as_written(name, self._value(right, field))
            if isinstance(right, exp.Column):
                name, field = self._column(right)
                return flipped(name, self._value(left, field))
            raise _Untranslatable(f"{node.sql()!r} compares no column")
        raise _Untranslatable(f"{node.sql()!r} is not a comparison pyiceberg can evaluate")

    def _starts_with(self, node: exp.Like) -> BooleanExpression:
        ice = _pyiceberg_expressions()
        name, _ = self._column(node.this)
        pattern = node.expression
        text = pattern.this if isinstance(pattern, exp.Literal) and pattern.is_string else None
        if text is None or not text.endswith("%") or any(c in text[:-1] for c in "%_\\"):
            raise _Untranslatable(f"{node.sql()!r}: only LIKE 'prefix%' can be evaluated")
        return ice.StartsWith(name, text[:-1])

    def _column(self, node: exp.Expression) -> tuple[str, Any]:
        if not isinstance(node, exp.Column):
            raise _Untranslatable(f"{node.sql()!r} is not a column of the table")
        field = _field(self.schema, node.name)
        if field is None:
            raise _Untranslatable(f"the table has no column {node.name!r}")
        name = self.schema.find_column_name(field.field_id)
        if name is None:
            raise _Untranslatable(f"the table has no column {node.name!r}")
        return name, field

    def _value(self, node: exp.Expression, field: Any) -> Any:
        """A literal as the value pyiceberg compares ``field`` with, in the field's own type."""
        node = node.unnest()
        negative = isinstance(node, exp.Neg)
        if negative:
            node = node.this
        if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
            node = node.this  # TIMESTAMP '...', DATE '...': the text, read in the column's type below
        if isinstance(node, exp.Boolean):
            return bool(node.this)
        if not isinstance(node, exp.Literal):
            raise _Untranslatable(f"{node.sql()!r} is not a literal value")
        if not node.is_string:
            number = float(node.this) if any(c in node.this for c in ".eE") else int(node.this)
            return -number if negative else number
        return _typed(node.this, field)


def _typed(text: str, field: Any) -> Any:
    """A string literal read as Spark casts it for a column of ``field``'s type; pyiceberg's text otherwise."""
    from pyiceberg.types import DateType, TimestampType, TimestamptzType

    kind = field.field_type
    try:
        if isinstance(kind, TimestamptzType):  # Spark reads a zone-less text in the session's zone: UTC here
            moment = datetime.fromisoformat(text.strip())
            return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).isoformat()
        if isinstance(kind, TimestampType):
            return datetime.fromisoformat(text.strip()).replace(tzinfo=None).isoformat()
        if isinstance(kind, DateType):
            return date.fromisoformat(text.strip()[:10]).isoformat()
    except ValueError:
        raise _Untranslatable(f"{text!r} is not a {kind} value for column {field.name!r}") from None
    return text


def check_predicate(predicate: str, what: str) -> None:
    """Parse ``predicate`` as Spark would take it, or fail the task without retries, naming ``what`` and it."""
    from airflow.sdk.exceptions import AirflowFailException

    try:
        parse_predicate(predicate, what=what, rendered=True)  # the final text: rendered, where it was a template
    except PredicateError as error:
        raise AirflowFailException(str(error)) from None
