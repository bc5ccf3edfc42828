"""The libraries apps are written with, unchanged, against the real server on 127.0.0.1 with the
starter model: `instructor` (TOOLS and JSON modes), a `pydantic-ai` agent that calls a tool,
and `langchain-openai`'s `bind_tools`. What they return is validated with `jsonschema` and by
the libraries' own Pydantic models."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from support.serverproc import running
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")
pydantic = pytest.importorskip("pydantic")

pytestmark = pytest.mark.slow


class City(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")  # additionalProperties: false, as OpenAI's strict mode wants

    name: str = pydantic.Field(max_length=40)
    country: str = pydantic.Field(max_length=40)
    population: int = pydantic.Field(ge=0)


CITY_SCHEMA = City.model_json_schema()
ASK_CITY = [{"role": "user", "content": "Describe Paris: its name, country and population."}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # no drafts: a verified batch's logits sum in another order than one token's, so with
    # `--draft auto` the starter's greedy JSON may take the other of two near-tied tokens
    with running(["--model", "starter", "--ctx", "2048", "--draft", "off"], tmp_path_factory.mktemp("serve")) as srv:
        yield srv


@pytest.fixture(scope="module")
def model(server) -> str:
    return server.get("/v1/models")[1]["data"][0]["id"]


def openai_client(server) -> "openai.OpenAI":
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.mark.parametrize("mode", ["TOOLS", "JSON_SCHEMA"])
def test_instructor_returns_a_validated_object(server, model, mode):
    """TOOLS: a forced call to a function whose parameters are the model's schema; JSON_SCHEMA:
    `response_format` json_schema. Both are enforced while sampling."""
    instructor = pytest.importorskip("instructor")
    client = instructor.from_openai(openai_client(server), mode=getattr(instructor.Mode, mode))
    city = client.chat.completions.create(model=model, response_model=City, messages=ASK_CITY,
                                          max_tokens=300, temperature=0, max_retries=0)
    assert isinstance(city, City)
    jsonschema.validate(city.model_dump(), CITY_SCHEMA)


def test_instructor_json_mode_gets_json_objects(server, model):
    """JSON mode: `response_format` json_object, the schema only in the prompt. The server
    guarantees a JSON object; following the schema is the model's part (the starter, 135M,
    writes the schema back), so what instructor gets is checked, and its verdict is on the
    schema, never on the JSON."""
    instructor = pytest.importorskip("instructor")
    from instructor.core import InstructorRetryException

    client = instructor.from_openai(openai_client(server), mode=instructor.Mode.JSON)
    raw: list[str] = []
    client.on("completion:response", lambda response: raw.append(response.choices[0].message.content))
    try:
        city = client.chat.completions.create(model=model, response_model=City, messages=ASK_CITY,
                                              max_tokens=200, temperature=0, max_retries=0)
        jsonschema.validate(city.model_dump(), CITY_SCHEMA)
    except InstructorRetryException as exc:
        assert re.search(r"\d+ validation errors? for City", str(exc)) and "Invalid JSON" not in str(exc)
    assert len(raw) >= 1 and all(isinstance(json.loads(text), dict) for text in raw)


def test_pydantic_ai_agent_calls_a_tool(server, model):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ToolCallPart, ToolReturnPart
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    calls: list[str] = []

    def get_weather(city: str) -> str:
        """The current weather in a city."""
        calls.append(city)
        return f"18 degrees and sunny in {city}"

    llm = OpenAIChatModel(model, provider=OpenAIProvider(base_url=server.url + "/v1", api_key="unused"))
    # The first step must call the tool (the starter is too small to decide to), the next answers.
    agent = Agent(llm, tools=[get_weather], model_settings=lambda ctx: {
        "tool_choice": ["get_weather"] if ctx.run_step <= 1 else "none", "max_tokens": 60,
        "temperature": 0})
    result = asyncio.run(agent.run("What is the weather in Paris?"))
    assert len(calls) >= 1 and all(isinstance(c, str) and c for c in calls)
    parts = [p for m in result.all_messages() for p in m.parts]
    tool_calls = [p for p in parts if isinstance(p, ToolCallPart)]
    assert tool_calls and tool_calls[0].tool_name == "get_weather"
    jsonschema.validate(tool_calls[0].args_as_dict(), {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    assert any(isinstance(p, ToolReturnPart) and "sunny" in str(p.content) for p in parts)
    assert isinstance(result.output, str) and result.output.strip()


def test_langchain_bind_tools(server, model):
    pytest.importorskip("langchain_openai")
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langchain_openai import ChatOpenAI

    def get_weather(city: str, unit: str = "C") -> str:
        """The current weather in a city.

        Args:
            city: the city's name
            unit: C or F
        """
        return "sunny"

    llm = ChatOpenAI(model=model, base_url=server.url + "/v1", api_key="unused", temperature=0,
                     max_tokens=80, max_retries=0)
    message = llm.bind_tools([get_weather], tool_choice="get_weather").invoke("Weather in Paris?")
    assert message.tool_calls, message
    call = message.tool_calls[0]
    assert call["name"] == "get_weather" and call["id"].startswith("call_")
    jsonschema.validate(call["args"], convert_to_openai_tool(get_weather)["function"]["parameters"])
    streamed = None
    for piece in llm.bind_tools([get_weather], tool_choice="any").stream("Weather in Lyon?"):
        streamed = piece if streamed is None else streamed + piece
    assert streamed.tool_calls and streamed.tool_calls[0]["name"] == "get_weather"
    jsonschema.validate(streamed.tool_calls[0]["args"],
                        convert_to_openai_tool(get_weather)["function"]["parameters"])
