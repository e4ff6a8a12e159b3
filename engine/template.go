package engine

import (
	"errors"
	"strings"

	"github.com/dflash/dflash/format/hf"
	"github.com/dflash/dflash/tokenizer"
	"github.com/dflash/dflash/tokenizer/chat"
)

// TemplateKind says where a model's chat formatting comes from.
type TemplateKind int

const (
	// TemplateNone: the model has no tokenizer, so no text and no chat.
	TemplateNone TemplateKind = iota
	// TemplateModel: the folder's own chat template (tokenizer_config.json).
	TemplateModel
	// TemplateChatML: no template, but the vocabulary has ChatML's tokens, so the conversation
	// is written in ChatML, which such models were tuned on.
	TemplateChatML
	// TemplatePlain: neither (tiny story models); see PlainTemplate.
	TemplatePlain
)

// PlainTemplate describes the chat fallback for models with neither a chat template nor ChatML
// tokens: each message as "System: ...", "User: ..." or "Assistant: ..." (the role capitalised),
// separated by blank lines, and "Assistant:" to prompt the reply. It is a description shown to
// clients, not a Jinja template.
const PlainTemplate = "System: {system}\n\nUser: {user}\n\nAssistant: {assistant}\n\n...Assistant:"

// Template is a model's chat formatting and where it came from.
type Template struct {
	Kind TemplateKind
	// Chat renders TemplateModel and TemplateChatML conversations; nil otherwise.
	Chat *chat.Template
	// Source is the model's template text (TemplateModel), or "" for the built-in ones.
	Source string
}

// chooseTemplate takes the folder's template, else ChatML when the vocabulary has its tokens,
// else the plain fallback; a model without a tokenizer has none.
func chooseTemplate(tc *hf.TokenizerConfig, tok tokenizer.Tokenizer) (Template, error) {
	if tok == nil {
		return Template{}, nil
	}
	if tc.ChatTemplate != "" {
		cc, err := chat.FromTokenizerConfig(tc)
		if err != nil {
			return Template{}, err
		}
		return Template{Kind: TemplateModel, Chat: cc.Template, Source: cc.Source}, nil
	}
	if _, ok := tok.TokenID("<|im_start|>"); ok {
		return Template{Kind: TemplateChatML, Chat: chat.ChatML()}, nil
	}
	return Template{Kind: TemplatePlain}, nil
}

// String names the template as listings show it: the model's source, or the built-in's name.
func (t Template) String() string {
	switch t.Kind {
	case TemplateModel:
		return t.Source
	case TemplateChatML:
		return "(ChatML)"
	case TemplatePlain:
		return PlainTemplate
	}
	return ""
}

// Render writes a conversation as the model's prompt. The plain fallback honours only
// AddGenerationPrompt.
func (t Template) Render(msgs []chat.Message, opt chat.Options) (string, error) {
	if t.Chat != nil {
		return t.Chat.Render(msgs, opt)
	}
	if t.Kind == TemplateNone {
		return "", errors.New("the model has no tokenizer, so no chat template: give token ids")
	}
	var b strings.Builder
	for i, msg := range msgs {
		if i > 0 {
			b.WriteString("\n\n")
		}
		role := msg.Role
		if role != "" {
			role = strings.ToUpper(role[:1]) + role[1:]
		}
		b.WriteString(role + ": " + msg.Content)
	}
	if opt.AddGenerationPrompt {
		if len(msgs) > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString("Assistant:")
	}
	return b.String(), nil
}
