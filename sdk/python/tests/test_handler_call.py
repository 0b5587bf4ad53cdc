"""The endpoint calling convention: JSON body -> handler arguments, and the handler_params shape."""

import unittest

from berth import Context, HandlerArgumentsError, endpoint
from berth.handler_call import bind_endpoint_call, describe_params

CTX = Context(task_id="t-1")


def call(func, body):
    args, kwargs = bind_endpoint_call(func, body, CTX)
    return func(*args, **kwargs)


def add(x, y=2):
    return ("add", x, y)


def with_context(context, x):
    return ("ctx", context, x)


def single(data):
    return ("single", data)


def single_with_context(payload, context):
    return ("single", payload, context)


def keywords(**inputs):
    return ("kw", inputs)


def keywords_and_context(context, **inputs):
    return ("kw", context, inputs)


def takes_callback(x, callback_url=None):
    return ("cb", x, callback_url)


def keyword_only(*, a, b=1):
    return ("ko", a, b)


def positional_only(a, b=5, /, c=0):
    return ("po", a, b, c)


def star_args(*args, x):
    return ("star", args, x)


def nothing():
    return "nothing"


class BindTest(unittest.TestCase):
    def test_body_keys_are_keyword_arguments(self):
        self.assertEqual(call(add, {"x": 1, "y": 5}), ("add", 1, 5))
        self.assertEqual(call(add, {"x": 1}), ("add", 1, 2))
        self.assertEqual(call(keyword_only, {"a": 3}), ("ko", 3, 1))
        self.assertEqual(call(star_args, {"x": 1}), ("star", (), 1))
        self.assertEqual(call(nothing, {}), "nothing")

    def test_context_parameter_gets_the_context(self):
        self.assertEqual(call(with_context, {"x": 4}), ("ctx", CTX, 4))
        self.assertEqual(call(keywords_and_context, {"a": 1}), ("kw", CTX, {"a": 1}))

    def test_one_named_parameter_gets_the_whole_body(self):
        self.assertEqual(call(single, {"a": 1, "b": [2]}), ("single", {"a": 1, "b": [2]}))
        self.assertEqual(call(single_with_context, {"q": "x"}), ("single", {"q": "x"}, CTX))
        # A body with the parameter's own key binds it by name.
        self.assertEqual(call(single, {"data": 7}), ("single", 7))
        # An empty body binds nothing: the parameter is missing.
        with self.assertRaises(HandlerArgumentsError) as ctx:
            call(single, {})
        self.assertEqual(ctx.exception.missing, ["data"])

    def test_var_keyword_takes_any_key(self):
        self.assertEqual(call(keywords, {"a": 1, "context": 2}), ("kw", {"a": 1, "context": 2}))
        with self.assertRaises(HandlerArgumentsError) as ctx:
            call(keywords_and_context, {"context": 1})
        self.assertEqual(ctx.exception.unknown, ["context"])

    def test_unknown_and_missing_keys_are_named_together(self):
        with self.assertRaises(HandlerArgumentsError) as ctx:
            call(add, {"y": 1, "z": 2, "w": 3})
        e = ctx.exception
        self.assertEqual((e.unknown, e.missing), (["z", "w"], ["x"]))
        self.assertIsInstance(e, TypeError)
        self.assertIn("'z', 'w'", str(e))
        self.assertIn("needs the key 'x'", str(e))
        self.assertIn("add(x, y=2)", str(e))
        with self.assertRaises(HandlerArgumentsError) as ctx:
            call(with_context, {"x": 1, "context": 2})
        self.assertEqual(ctx.exception.unknown, ["context"])
        with self.assertRaises(HandlerArgumentsError) as ctx:
            call(nothing, {"a": 1})
        self.assertEqual(ctx.exception.unknown, ["a"])

    def test_callback_url_is_dropped_unless_accepted(self):
        self.assertEqual(call(add, {"x": 1, "callback_url": "http://h/cb"}), ("add", 1, 2))
        self.assertEqual(call(takes_callback, {"x": 1, "callback_url": "http://h/cb"}), ("cb", 1, "http://h/cb"))
        self.assertEqual(call(keywords, {"callback_url": "u"}), ("kw", {"callback_url": "u"}))
        self.assertEqual(call(single, {"a": 1, "callback_url": "u"}), ("single", {"a": 1}))

    def test_positional_only_parameters_are_passed_by_position(self):
        self.assertEqual(call(positional_only, {"a": 1, "c": 3}), ("po", 1, 5, 3))
        self.assertEqual(call(positional_only, {"a": 1, "b": 2}), ("po", 1, 2, 0))
        self.assertEqual(bind_endpoint_call(positional_only, {"a": 1}, CTX), ((1, 5), {}))

    def test_body_must_be_an_object(self):
        for bad in ([1], "x", None):
            with self.assertRaises(HandlerArgumentsError) as ctx:
                bind_endpoint_call(add, bad, CTX)
            self.assertIn("JSON object", str(ctx.exception))

    def test_a_decorated_endpoint_binds_like_its_function(self):
        e = endpoint(add)
        self.assertEqual(call(e, {"x": 1}), ("add", 1, 2))
        self.assertEqual(describe_params(e), describe_params(add))

    def test_callable_without_a_signature_takes_the_body_as_keywords(self):
        self.assertEqual(bind_endpoint_call(dict, {"a": 1}, CTX), ((), {"a": 1}))


class DescribeParamsTest(unittest.TestCase):
    def test_shapes(self):
        self.assertEqual(
            describe_params(add), {"names": ["x", "y"], "required": ["x"], "var_keyword": False, "context": False}
        )
        self.assertEqual(
            describe_params(keywords_and_context), {"names": [], "required": [], "var_keyword": True, "context": True}
        )
        self.assertEqual(describe_params(single_with_context)["names"], ["payload"])
        self.assertEqual(describe_params(positional_only)["names"], ["a", "b", "c"])
        self.assertEqual(describe_params(star_args), {"names": ["x"], "required": ["x"], "var_keyword": False, "context": False})

    def test_documented_rule_agrees_with_binding(self):
        """describe_params' docstring rule, applied to keys alone, refuses exactly what binding refuses."""

        def refused_by_rule(p, body):
            keys = set(body)
            if "callback_url" not in p["names"] and not p["var_keyword"]:
                keys.discard("callback_url")
            if p["var_keyword"]:
                return p["context"] and "context" in keys
            if len(p["names"]) == 1 and keys and p["names"][0] not in keys:
                return False
            return bool(keys - set(p["names"]) or set(p["required"]) - keys)

        funcs = [add, with_context, single, single_with_context, keywords, keywords_and_context, takes_callback,
                 keyword_only, positional_only, star_args, nothing]
        bodies = [{}, {"x": 1}, {"x": 1, "y": 2}, {"z": 1}, {"context": 1}, {"callback_url": "u"},
                  {"callback_url": "u", "x": 1}, {"a": 1}, {"data": 1}, {"a": 1, "b": 2, "c": 3}]
        for f in funcs:
            for body in bodies:
                try:
                    bind_endpoint_call(f, body, CTX)
                    refused = False
                except HandlerArgumentsError:
                    refused = True
                self.assertEqual(refused_by_rule(describe_params(f), body), refused, (f.__name__, body))


if __name__ == "__main__":
    unittest.main()
