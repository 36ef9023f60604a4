"""The API kit the agent, reviewer and metrics APIs share: strict serializers (`serializers`),
problem+json for every error (`problems`), JSON bodies with a size limit (`parsers`), cursor
pages (`pagination`) and the JSON-first content negotiation (`negotiation`)."""
